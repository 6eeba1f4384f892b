"""The CDK side: typed config, catalogs, stages, stacks and the constructs they are built from."""
