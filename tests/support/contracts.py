"""Feature contracts for tests that build a model without a dataset."""
from dlrm.features import FeatureContract, one_hot_tables


def one_hot_contract(rows, dim, num_numerical=13):
    """Criteo's shape: `num_<i>` numerical features and one-hot tables `cat_<i>` of one dim."""
    return FeatureContract("label", tuple(f"num_{i}" for i in range(num_numerical)), one_hot_tables(rows, dim))
