"""The one optimizer registry: the trainer's optimizers, main.py's and the planner's --optimizer choices
and the planner's slot counts all come from `dlrm.embedding.optimizer_slots`."""
from __future__ import annotations

import pytest
import tensorflow as tf

from dlrm.cli import build_parser as main_parser
from dlrm.config import OptimizerConfig
from dlrm.embedding.optimizer_slots import OPTIMIZER_NAMES, slot_names, slots_for_optimizer
from dlrm.embedding.planner.cli import build_parser as planner_parser
from dlrm.train.optimizers import OPTIMIZERS, build_optimizer


def _choices(parser, flag: str) -> list:
    return [list(action.choices) for action in parser._actions if flag in action.option_strings][0]


@pytest.mark.parametrize("name", OPTIMIZER_NAMES)
def test_every_registered_optimizer_keeps_exactly_its_registered_slots(name):
    optimizer = build_optimizer(OptimizerConfig(optimizer=name), schedule=lambda step: 0.1)
    table = tf.Variable(tf.zeros([3, 2]), name=f"table_{name}")
    optimizer.build([table])
    assert tuple(optimizer.slots_for(table)) == slot_names(name) == OPTIMIZERS[name].slot_names
    assert slots_for_optimizer(name) == len(slot_names(name))


def test_the_trainer_and_both_clis_offer_exactly_the_registered_optimizers():
    assert tuple(OPTIMIZERS) == OPTIMIZER_NAMES == ("sgd", "adagrad", "adam", "rmsprop", "ftrl")
    assert _choices(main_parser(), "--optimizer") == _choices(planner_parser(), "--optimizer") == list(OPTIMIZER_NAMES)
    assert [slots_for_optimizer(name) for name in OPTIMIZER_NAMES] == [0, 1, 2, 1, 2]


def test_an_unknown_optimizer_is_refused_naming_the_choices():
    names = r"\('sgd', 'adagrad', 'adam', 'rmsprop', 'ftrl'\)"
    with pytest.raises(ValueError, match=rf"unknown optimizer 'lamb'; choose one of {names}"):
        slots_for_optimizer("lamb")
