"""`python -m cli`: the same as the `llmp` console script."""

from cli.app import main

main()
