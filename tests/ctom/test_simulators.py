"""User simulators: the scripted rules, prompt filling and the HTTP client against a local
stub server on 127.0.0.1 (timeouts, 500s, malformed JSON, retries running out)."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from jaxtom.ctom.data import builtin_tasks
from jaxtom.ctom.satisfaction import END_SIGNAL
from jaxtom.ctom.simulators import (HTTPSimulator, ScriptedSimulator, SimRequest,
                                    SimulatorError, parse_simulator_output, simulator_prompt)

MATH = builtin_tasks("math")[1]  # 3x + 7 = 31 -> 8
CODE = builtin_tasks("coding")[8]  # fibonacci
WRITE = builtin_tasks("writing")[0]


def req(task, *history, final=False):
    return SimRequest(task, tuple(history), final)


def test_scripted_math_rules():
    sim = ScriptedSimulator()
    out = sim.reply([req(MATH, ("user", MATH.prompt), ("assistant", r"x = \boxed{8}")),
                     req(MATH, ("user", MATH.prompt), ("assistant", r"\boxed{9}")),
                     req(MATH, ("user", MATH.prompt), ("assistant", "x is 8"))])
    assert [r.text for r in out] == ["ok, that's right.",
                                     "That's wrong, could you double-check your work?",
                                     "Please state your final answer inside \\boxed{}."]


def test_scripted_coding_and_writing_rules():
    sim = ScriptedSimulator()
    good, bad = CODE.reference, "def task_func(n):\n    return n\n"
    out = sim.reply([req(CODE, ("user", CODE.prompt), ("assistant", good)),
                     req(CODE, ("user", CODE.prompt), ("assistant", bad)),
                     req(CODE, ("user", CODE.prompt), ("assistant", good), final=True),
                     req(WRITE, ("user", WRITE.prompt), ("assistant", "What are the new hours?")),
                     req(WRITE, ("user", WRITE.prompt), ("assistant", WRITE.reference))])
    texts = [r.text for r in out]
    assert texts[0] == "ok" and texts[1].startswith("That doesn't match") and texts[2] == END_SIGNAL
    assert "hours" in texts[3].lower()
    assert texts[4] == "ok" or texts[4].startswith("You're missing")


def test_simulator_prompt_holds_hidden_info_and_visible_history_only():
    p = simulator_prompt(req(CODE, ("user", CODE.prompt), ("assistant", "code"), final=True))
    assert CODE.hidden in p and "**Assistant**: I WANT TO ANSWER:\ncode" in p
    assert "{chat_history}" not in p and "{hidden_information}" not in p
    m = simulator_prompt(req(MATH, ("user", MATH.prompt)))
    assert "8" in m and "**User**: " + MATH.prompt in m


@pytest.mark.parametrize("text,want", [
    ('{"current_status": "x", "thought": "y", "response": "ok"}', "ok"),
    ('```json\n{"response": "Add the date."}\n```', "Add the date."),
    ('{"response": "unterminated', None), ('garbage', None),
    ('{"thought": "a", "response": "say \\"hi\\"", }', 'say "hi"'),
])
def test_parse_simulator_output(text, want):
    assert parse_simulator_output(text) == want


class Stub(BaseHTTPRequestHandler):
    plan: list = []  # per call: "ok" | "500" | "slow" | "garbage" | "nochoices"
    calls: list = []

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Stub.calls.append(body)
        action = Stub.plan.pop(0) if Stub.plan else "ok"
        if action == "slow":
            time.sleep(1.0)
        if action == "500":
            self.send_response(500)
            self.end_headers()
            return
        payload = {"garbage": b"{not json", "nochoices": b'{"x": 1}'}.get(action)
        if payload is None:
            content = json.dumps({"current_status": "", "thought": "", "response": "ok thanks"})
            payload = json.dumps({"choices": [{"message": {"content": content}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        try:
            self.wfile.write(payload)
        except BrokenPipeError:
            pass


@pytest.fixture()
def server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Stub)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    Stub.plan, Stub.calls = [], []
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    srv.shutdown()
    srv.server_close()


def client(url, **kw):
    return HTTPSimulator(url, "stub", timeout_s=0.3, retries=3, backoff_s=0.01, **kw)


def test_http_survives_timeouts_500s_and_malformed_json(server):
    Stub.plan = ["slow", "500", "garbage", "ok"]
    [r] = client(server).reply([req(WRITE, ("user", WRITE.prompt), ("assistant", "draft"))])
    assert r == type(r)("ok thanks") and len(Stub.calls) == 4
    assert Stub.calls[-1]["temperature"] == 0.7
    assert Stub.calls[-1]["messages"][0]["content"].startswith("/no_think")


def test_http_clear_error_when_retries_run_out(server):
    Stub.plan = ["500", "nochoices", "500", "garbage"]
    [r] = client(server).reply([req(WRITE, ("user", WRITE.prompt))])
    assert r.text == "" and "failed after 4 attempts" in r.error and "malformed" in r.error
    Stub.plan = ["500"] * 4
    with pytest.raises(SimulatorError, match="HTTP 500"):
        client(server, strict=True).reply([req(WRITE, ("user", WRITE.prompt))])


def test_http_unreachable_server_fails_cleanly():
    sim = HTTPSimulator("http://127.0.0.1:9/v1", "m", timeout_s=0.2, retries=1, backoff_s=0.01)
    [r] = sim.reply([req(MATH, ("user", MATH.prompt))])
    assert r.error and "127.0.0.1:9" in r.error
