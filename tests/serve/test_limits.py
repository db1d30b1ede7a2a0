"""serve's limits (serve/limits.py): each refused at start when it cannot be kept."""

import math

import pytest

from openjev_batch.serve.limits import Limits


@pytest.mark.parametrize("name", ["timeout_s", "body_timeout_s", "header_timeout_s", "batch_wait_ms", "batch_ms"])
@pytest.mark.parametrize("value", [math.nan, math.inf, 1e300])
def test_a_wait_or_timeout_must_be_finite(name, value):
    """Hostile trial: `--batch-wait-ms nan` spun the scoring thread at full CPU, deaf to SIGTERM (SIGKILL alone
    ended it); `inf` ended the server in a traceback at its first request; `--timeout inf` at its start
    (`int(inf)`), `--body-timeout nan` answered every POST 500. Each is now refused before the model loads."""
    with pytest.raises(ValueError, match=r"must be (positive|a finite number|0 or more)"):
        Limits(**{name: value})


def test_the_defaults_and_a_day_are_taken():
    assert Limits().batch_wait_ms == 2.0
    assert Limits(timeout_s=86_400, body_timeout_s=0.5, batch_wait_ms=0).timeout_s == 86_400
