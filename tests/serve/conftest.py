"""Fixtures for the qw-serve tests (tests/check_serve.sh runs them).

QW_BUILD names the build directory (default: the repository's build/); the
server is $QW_BUILD/bin/qw-serve unless QW_SERVE names another binary (the
ASan build's, say). Every server here listens on 127.0.0.1 with --port 0: the
port is read from its "listening on" line, then /health is polled until 200.
A server is stopped with SIGTERM and must exit 0 with no sanitizer report on
stderr, so a crash, leak or hang at shutdown fails the test that owned it.
"""
import json
import os
import re
import signal
import socket
import struct
import subprocess
import threading
import time

import openai
import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

REPO = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.path.abspath(os.environ.get("QW_BUILD", os.path.join(REPO, "build")))
SERVE = os.path.abspath(os.environ.get("QW_SERVE", os.path.join(BUILD, "bin", "qw-serve")))
MAKEMODEL = os.path.join(BUILD, "bin", "qw-makemodel")
# An ASan server is several times slower to start and to answer.
SLOW = float(os.environ.get("QW_SERVE_SLOW", "1"))

LISTEN_RE = re.compile(r"^qw-serve: listening on (http://[^\s:/]+:(\d+))$")
SANITIZER_RE = re.compile(r"AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|runtime error:")


class Server:
    """One qw-serve process. start() returns once /health answers 200."""

    def __init__(self, model, args, workdir):
        self.model = model
        self.args = list(args)
        self.name = os.path.basename(model.rstrip("/"))
        for i, a in enumerate(self.args[:-1]):
            if a == "--served-model-name":
                self.name = self.args[i + 1]
        self.stdout_lines = []
        self.url = None
        self.port = None
        self.proc = None
        self.stopped_rc = None
        self._listening = threading.Event()
        self._ready = threading.Event()
        os.makedirs(workdir, exist_ok=True)
        self.stderr_path = os.path.join(workdir, "qw-serve-%d.stderr" % id(self))

    def _read_stdout(self):
        for raw in self.proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            self.stdout_lines.append(line)
            m = LISTEN_RE.match(line)
            if m and not self._listening.is_set():
                self.url = m.group(1)
                self.port = int(m.group(2))
                self._listening.set()
            if line.startswith("qw-serve: ready"):
                self._ready.set()
        self._listening.set()  # EOF: wake a waiter; it sees url is None

    def spawn(self):
        """Start the process; wait for its "listening on" line only."""
        cmd = [SERVE, "--model", self.model, "--host", "127.0.0.1", "--port", "0"] + self.args
        self._stderr = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=self._stderr)
        threading.Thread(target=self._read_stdout, daemon=True).start()
        if not self._listening.wait(20 * SLOW) or self.url is None:
            self.kill()
            raise AssertionError("qw-serve printed no 'listening on' line (cmd %s, stdout %r):\n%s"
                                 % (cmd, self.stdout_lines, self.stderr_text()))
        return self

    def start(self):
        self.spawn()
        deadline = time.time() + 30 * SLOW
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError("qw-serve exited %d before ready:\n%s"
                                     % (self.proc.returncode, self.stderr_text()))
            try:
                if requests.get(self.url + "/health", timeout=5).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.02)
        self.kill()
        raise AssertionError("qw-serve /health never answered 200:\n" + self.stderr_text())

    def stderr_text(self):
        try:
            with open(self.stderr_path, "rb") as f:
                return f.read().decode("utf-8", "replace")[-6000:]
        except OSError:
            return ""

    def signal(self, sig):
        self.proc.send_signal(sig)

    def wait(self, timeout):
        """The exit code, or None when the process is still running after timeout."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if hasattr(self, "_stderr"):
            self._stderr.close()

    def stop(self):
        """SIGTERM; assert exit 0 within the drain deadline and a clean stderr."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        rc = self.wait(40 * SLOW)
        if rc is None:
            self.kill()
            raise AssertionError("qw-serve did not exit after SIGTERM:\n" + self.stderr_text())
        self._stderr.close()
        err = self.stderr_text()
        assert rc == 0, "qw-serve exited %d:\n%s" % (rc, err)
        assert not SANITIZER_RE.search(err), "sanitizer report from qw-serve:\n" + err
        self.stopped_rc = rc


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    """A tiny random Qwen3 (vocab 512, 2048 positions) from the build's qw-makemodel."""
    assert os.access(SERVE, os.X_OK), "no qw-serve binary at " + SERVE
    out = tmp_path_factory.mktemp("models") / "tiny"
    subprocess.run([MAKEMODEL, "--shape", "tiny", "--dtype", "bf16", "--out", str(out)],
                   check=True, capture_output=True)
    return str(out)


@pytest.fixture(scope="session")
def slow_model_dir(tmp_path_factory):
    """A larger random model (hidden 512, 8 layers: about 300 tokens/s on one
    core, against 15000 for the tiny one) for the tests that need a request
    still running while they disconnect, time out, queue or shut down."""
    out = tmp_path_factory.mktemp("models") / "slow"
    subprocess.run([MAKEMODEL, "--shape", "tiny", "--hidden", "512", "--layers", "8", "--intermediate", "1536",
                    "--heads", "8", "--kv-heads", "4", "--head-dim", "64", "--dtype", "bf16", "--out", str(out)],
                   check=True, capture_output=True)
    return str(out)


@pytest.fixture(scope="session")
def slow_server(slow_model_dir, tmp_path_factory):
    """A shared server of the slow model with default options (model name "slow")."""
    s = Server(slow_model_dir, ["--threads", "1"], str(tmp_path_factory.mktemp("logs"))).start()
    yield s
    s.stop()


@pytest.fixture(scope="session")
def server(model_dir, tmp_path_factory):
    """The shared server with default options (model name "tiny")."""
    s = Server(model_dir, ["--threads", "1"], str(tmp_path_factory.mktemp("logs"))).start()
    yield s
    s.stop()


@pytest.fixture
def start_server(model_dir, slow_model_dir, tmp_path):
    """Factory: start_server(*args, slow=False) -> a started Server of the tiny
    (or the slow) model, stopped (and checked) at teardown."""
    started = []

    def make(*args, ready=True, slow=False):
        s = Server(slow_model_dir if slow else model_dir, ["--threads", "1"] + list(args), str(tmp_path))
        started.append(s)
        return s.start() if ready else s.spawn()

    yield make
    errors = []
    for s in started:
        try:
            if s.stopped_rc is None:
                s.stop()
        except AssertionError as e:
            errors.append(str(e))
    assert not errors, "\n".join(errors)


@pytest.fixture(autouse=True)
def still_serving(server):
    """After every test, bad requests included, the shared server is healthy and answers."""
    yield
    assert server.proc.poll() is None, "qw-serve died:\n" + server.stderr_text()
    assert requests.get(server.url + "/health", timeout=10 * SLOW).status_code == 200
    r = post(server, "/v1/completions", {"model": server.name, "prompt": "ok?", "max_tokens": 2})
    assert r.status_code == 200, r.text


def make_client(srv, timeout=60):
    """The official OpenAI client against srv; no retries, so statuses are seen as sent."""
    return openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0,
                         timeout=timeout * SLOW)


@pytest.fixture(scope="session")
def client(server):
    return make_client(server)


# ---- helpers shared by the test files --------------------------------------------

def post(srv, path, body, headers=None, timeout=60):
    """POST a JSON value (or raw bytes) with requests; returns the Response."""
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    data = body if isinstance(body, (bytes, bytearray)) else json.dumps(body).encode()
    return requests.post(srv.url + path, data=data, headers=h, timeout=timeout * SLOW)


def check_openai_error(resp, status, param=None, code=None):
    """Assert resp is OpenAI's error shape with this status; returns the error object."""
    assert resp.status_code == status, (resp.status_code, resp.text[:500])
    assert resp.headers.get("Content-Type", "").startswith("application/json"), resp.headers
    body = resp.json()
    assert set(body) == {"error"}, body
    err = body["error"]
    assert set(err) >= {"message", "type", "param", "code"}, err
    assert isinstance(err["message"], str) and err["message"], err
    assert isinstance(err["type"], str) and err["type"], err
    if param is not None:
        assert err["param"] == param, err
    if code is not None:
        assert err["code"] == code, err
    return err


def sse_events(raw):
    """Split an OpenAI SSE body into its data payloads, checking the framing:
    every event is exactly `data: <payload>\\n\\n` and the last is [DONE].
    Returns the decoded JSON chunks before [DONE]."""
    assert raw.endswith(b"\n\n"), raw[-200:]
    events = raw[:-2].split(b"\n\n")
    for e in events:
        assert e.startswith(b"data: ") and b"\n" not in e, e[:200]
    assert events[-1] == b"data: [DONE]", events[-1][:200]
    return [json.loads(e[6:]) for e in events[:-1]]


def metrics(srv):
    """Scrape /metrics: {(sample name, frozenset(labels)): value}, via prometheus_client's parser."""
    r = requests.get(srv.url + "/metrics", timeout=10 * SLOW)
    assert r.status_code == 200, r.text[:300]
    out = {}
    for fam in text_string_to_metric_families(r.text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def metric(m, name, **labels):
    """Sum of the samples called name whose labels include the given ones (0 when none)."""
    want = set(labels.items())
    return sum(v for (n, ls), v in m.items() if n == name and want <= ls)


def metrics_when(srv, name, value, timeout=2, **labels):
    """Scrape until metric(name, labels) reaches value (a response can reach
    the client a moment before the server has counted it); returns the last
    scrape, the caller asserts on it."""
    m = {}

    def reached():
        m.update(metrics(srv))
        return metric(m, name, **labels) >= value
    wait_for(reached, timeout)
    return m


def wait_for(pred, timeout, step=0.02):
    """Poll pred() until true or timeout seconds; returns its last value."""
    deadline = time.time() + timeout * SLOW
    while True:
        v = pred()
        if v or time.time() >= deadline:
            return v
        time.sleep(step)


class RawRequest:
    """An HTTP/1.1 POST on a plain socket, so a test can drop the connection
    at a chosen moment (a client that disconnects mid-request)."""

    def __init__(self, srv, path, body, headers=None):
        data = json.dumps(body).encode() if not isinstance(body, bytes) else body
        self.sock = socket.create_connection(("127.0.0.1", srv.port), timeout=30 * SLOW)
        head = "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" \
               "Content-Length: %d\r\n" % (path, len(data))
        for k, v in (headers or {}).items():
            head += "%s: %s\r\n" % (k, v)
        self.sock.sendall(head.encode() + b"\r\n" + data)
        self.buf = b""

    def read_until(self, marker, limit=1 << 20):
        """Read until marker appears in what was received; returns all of it."""
        while marker not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise AssertionError("connection closed before %r: %r" % (marker, self.buf[-300:]))
            self.buf += chunk
            assert len(self.buf) < limit
        return self.buf

    def read_all(self):
        """Read the whole response (Content-Length, the end of a chunked body,
        or EOF); returns everything received, headers included."""
        while True:
            head, sep, body = self.buf.partition(b"\r\n\r\n")
            if sep:
                m = re.search(rb"(?im)^content-length:\s*(\d+)", head)
                if m and len(body) >= int(m.group(1)):
                    return self.buf
                if self.buf.endswith(b"\r\n0\r\n\r\n"):
                    return self.buf
            chunk = self.sock.recv(65536)
            if not chunk:
                return self.buf
            self.buf += chunk

    def status(self):
        head = self.read_until(b"\r\n\r\n")
        return int(head.split(b" ", 2)[1])

    def close(self, reset=False):
        """Close as a client does (FIN), or abort the connection (RST) when reset."""
        if reset:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.sock.close()


def long_body(model, stream=True, max_tokens=1500, **extra):
    """A completion request that runs for a while (ignore_eos: exactly max_tokens)."""
    b = {"model": model, "prompt": "a long story", "max_tokens": max_tokens,
         "ignore_eos": True, "temperature": 0, "stream": stream}
    b.update(extra)
    return b
