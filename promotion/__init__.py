"""Code that runs in AWS Lambda for promotion: a stage serving a version approved in another; stdlib and boto3 only."""
