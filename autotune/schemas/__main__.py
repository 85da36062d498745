"""`python -m autotune.schemas` writes the shipped JSON Schemas."""

from autotune.schemas import main

main()
