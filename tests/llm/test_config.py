"""The instance's ``llm`` section."""

import pytest

from placement_opt.errors import InputError
from placement_opt.settings import LLMConfig


def test_defaults_and_round_trip():
    cfg = LLMConfig.from_dict({}, "llm")
    assert cfg.policy == "adbs" and cfg.kv_block_tokens == 16
    assert LLMConfig.from_dict(cfg.to_dict(), "llm") == cfg


@pytest.mark.parametrize("data, field", [
    ({"policy": "lifo"}, "llm.policy"),
    ({"kv_block_tokens": 0}, "llm.kv_block_tokens"),
    ({"rebalance_fraction": 1.5}, "llm.rebalance_fraction"),
    ({"max_batch": 2.0}, "llm.max_batch"),
    ({"slo": 3}, "llm.slo"),
])
def test_bad_values_name_the_field(data, field):
    with pytest.raises(InputError) as e:
        LLMConfig.from_dict(data, "llm")
    assert e.value.field == field
