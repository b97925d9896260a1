"""`python -m scaffold`: the same command line as the `scaffold` script."""

from scaffold.cli import main

main()
