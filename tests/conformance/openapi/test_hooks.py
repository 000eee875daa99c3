"""Unit tests of hooks.py's second hook (link values percent-encoded in paths), run by
`tests/blackbox/schemathesis.rs` with the schemathesis venv's Python. The hook decides from what
the run sent and was answered whether a path parameter is a link's raw value; these tests give it
those histories directly, since a schemathesis run reaches each of them only for some seeds.
"""

import importlib.util
import json
import pathlib
import types
import unittest

_SPEC = importlib.util.spec_from_file_location(
    "threadstream_hooks", pathlib.Path(__file__).with_name("hooks.py")
)
hooks = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(hooks)


class _Meta:
    """The parts of schemathesis's `CaseMetadata` the hook reads: a positive stateful case."""

    def __init__(self):
        self.phase = types.SimpleNamespace(name="stateful")
        self.components = {}
        self.generation = types.SimpleNamespace(mode=None)

    def is_negative_at(self, _location):
        return False


def _case(path=None, query=None, body=None):
    return types.SimpleNamespace(meta=_Meta(), path_parameters=path or {}, query=query, body=body)


def _answered(case, answer):
    hooks.after_call(None, case, types.SimpleNamespace(content=json.dumps(answer).encode()))


def _sent_path(value):
    """The path parameter as the hook sends it: `value` as schemathesis's `quote_all` left it."""
    case = _case(path={"thread_id": value})
    hooks._encode_link_path_parameters(case)
    return case.path_parameters["thread_id"]


class LinkValues(unittest.TestCase):
    def setUp(self):
        hooks._SEEN.clear()
        hooks._ANSWERED.clear()

    def test_a_raw_value_from_a_query_is_sent_encoded_as_itself(self):
        _answered(_case(query={"threadId": "%12"}), {"messages": []})
        self.assertEqual(_sent_path("%12"), "%2512")

    def test_an_id_the_server_answered_is_sent_encoded_as_itself(self):
        # A thread named `%C2%9C%02` in a list, its decoded form also sent in some body.
        _answered(_case(body={"message": "\x9c\x02"}), {"ok": True})
        _answered(_case(), {"threads": [{"id": "%C2%9C%02"}]})
        self.assertEqual(_sent_path("%C2%9C%02"), "%25C2%259C%2502")

    def test_a_query_echoed_back_is_not_an_answer(self):
        # Drawn seed 944602905: the thread `U0ë` created, then the text `U0%C3%AB` asked for in
        # a query whose answer echoes it. The link's `U0ë` (sent by `quote_all` as `U0%C3%AB`)
        # must reach the server as `U0ë`, not as the other id `U0%C3%AB`.
        _answered(_case(body={"threadId": "U0ë"}), {"id": "U0ë"})
        _answered(
            _case(query={"threadId": "U0%C3%AB"}),
            {"threadId": "U0%C3%AB", "snapshot": {"threadId": "U0%C3%AB"}},
        )
        self.assertEqual(_sent_path("U0%C3%AB"), "U0%C3%AB")

    def test_an_echo_does_not_hide_an_id_answered_elsewhere(self):
        _answered(_case(query={"threadId": "%C2%9C"}), {"threadId": "%C2%9C"})
        _answered(_case(), {"threads": [{"id": "%C2%9C"}]})
        self.assertEqual(_sent_path("%C2%9C"), "%25C2%259C")


if __name__ == "__main__":
    unittest.main()
