"""``monarch.actor``'s telemetry names: ``traced``, ``span``, ``get_meter`` and the
``config`` module whose ``prefix_python_logs_with_actor`` the runtime reads."""

import logging

import monarch.actor
import monarch_actor


def test_the_telemetry_names_are_the_runtimes():
    import monarch.actor.config

    assert monarch.actor.config is monarch_actor.config
    assert monarch.actor.traced is monarch_actor.traced
    assert monarch.actor.span is monarch_actor.span
    assert monarch.actor.get_meter is monarch_actor.get_meter
    assert {"config", "traced", "span", "get_meter"} <= set(monarch.actor.__all__)


class Talker(monarch.actor.Actor):
    @monarch.actor.endpoint
    def say(self, text: str) -> None:
        logging.getLogger("facade.talk").warning(text)


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


def test_monarch_actor_config_switches_the_log_prefix():
    from monarch.actor import config

    talker = monarch.actor.this_proc().spawn("facade_talker", Talker)
    logger = logging.getLogger("facade.talk")
    lines = Lines()
    logger.addHandler(lines)
    try:
        talker.say.call_one("with").get()
        config.prefix_python_logs_with_actor = False
        try:
            talker.say.call_one("without").get()
        finally:
            config.prefix_python_logs_with_actor = True
    finally:
        logger.removeHandler(lines)
    actor = f"<root>.<{Talker.__module__}.Talker facade_talker{{}}>"
    assert lines.lines == [f"[actor={actor}] with", "without"]
