"""Ray's notice that token authentication is on (said on every start of a local Ray) is left out
while autotune starts or joins one; every other message of that logger passes, and the notice
passes again afterwards."""
from __future__ import annotations

import inspect
import logging

import pytest

from autotune.measure.ray_cluster import TOKEN_NOTICE, TOKEN_NOTICE_LOGGER, without_token_notice


class _Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_only_the_token_notice_is_left_out_and_only_while_connecting() -> None:
    log = logging.getLogger(TOKEN_NOTICE_LOGGER)
    kept = _Kept()
    log.addHandler(kept)
    try:
        notice = f"{TOKEN_NOTICE}. Set the mode to disabled to opt out."
        with without_token_notice():
            log.warning(notice)
            log.warning("Token authentication is disabled for this Ray cluster. Anyone with network access ...")
        log.warning(notice)
    finally:
        log.removeHandler(kept)
    assert kept.messages == ["Token authentication is disabled for this Ray cluster. Anyone with network access ...",
                             notice]


def test_ray_still_says_the_notice_from_that_logger_in_those_words() -> None:
    """The filter names Ray's logger and the notice's first words: a Ray that moves either would
    print the notice again, so this test says so."""
    pytest.importorskip("ray")
    from ray._private.authentication import authentication_token_setup as setup
    assert setup.logger.name == TOKEN_NOTICE_LOGGER
    assert TOKEN_NOTICE in inspect.getsource(setup._warn_token_auth_enabled)
