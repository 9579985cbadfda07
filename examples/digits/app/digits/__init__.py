"""A small CNN on scikit-learn's digits, trained with Cairn's workflows (examples/digits)."""
