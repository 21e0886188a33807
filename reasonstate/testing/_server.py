"""The emulator framework: a real HTTP/1.1 server on 127.0.0.1, routes, recorded requests, fault injection,
and the lifecycle every vendor emulator shares.

Every vendor emulator is a set of routes on an :class:`EmulatorServer`, owned by an :class:`Emulator`
(start/stop, a context manager, the recorded requests, injected faults, the options of a real SDK client
pointed at it); an emulator of a model API is a :class:`ScriptedEmulator` (the model's actions from a
:class:`~reasonstate.testing.script.Script`, the key of what it signs, a response transform, the model
aliases it resolves, the lock its handlers run under). The server binds a free port on
the loopback interface, serves each request on its own thread, records every request exactly as it arrived
(raw body bytes included, so tests can compare what the SDK put on the wire), and consumes injected
:class:`Fault` values first-in first-out before it calls the route handler.

Invariants:
  * ``server.requests[i].body`` is byte-for-byte what the client sent in its i-th request;
  * a request answered by a fault never reaches the handler (scripted state is not consumed);
  * every answer's ``Date`` header (RFC 9110 §6.6.1) is the emulator's clock: the wall clock plus what
    :meth:`Emulator.advance` added (time a test lets pass without waiting, e.g. past a cache lifetime);
  * the server listens on 127.0.0.1 unless :meth:`EmulatorServer.bind` names another IPv4 address (the
    standalone ``reasonstate emulate --host``); tests never change it.
"""

from __future__ import annotations

import contextlib
import json
import re
import select
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar, cast
from urllib.parse import parse_qs, urlsplit

import attrs

from reasonstate.testing.script import ModelAction, Responder, Script

__all__ = [
    "API_KEYS",
    "DEFAULT_SECRET",
    "Emulator",
    "EmulatorServer",
    "Fault",
    "JSONResponse",
    "RecordedRequest",
    "Route",
    "ScriptedEmulator",
    "StreamResponse",
    "Transform",
]

_E = TypeVar("_E", bound="Emulator")

API_KEYS: tuple[str, ...] = ("test-key", "emulator-key")
"""The API keys every emulator accepts unless its ``api_key=`` option names others: ``test-key`` (what each
emulator's ``client()`` sends) and ``emulator-key`` (what ``reasonstate emulate`` prints). Any other key is
refused as the vendor refuses a key it did not issue (401; Gemini: 400 ``API_KEY_INVALID``)."""

DEFAULT_SECRET = b"reasonstate-emulator-secret-v1"
"""The signing secret of an emulator built without ``secret=``. It is fixed, as a vendor's key is for an
organisation: a signature, encrypted item or thought signature issued by one emulator process verifies on
any later one (a snapshot restored against a restarted ``reasonstate emulate`` continues). Give
``secret=`` (``--secret``) to stand for another organisation, whose signatures do not verify here."""

Transform = Callable[[dict[str, Any]], dict[str, Any]]
"""Applied to every successful response body before it is sent; a streamed response is framed from the
transformed body, so both agree."""


@attrs.frozen(slots=True)
class RecordedRequest:
    """One request as it arrived: method, path (without query), query, lower-cased headers, raw body."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        """The body parsed as JSON (raises ``ValueError`` when it is not JSON)."""
        return json.loads(self.body)


@attrs.frozen(slots=True)
class JSONResponse:
    """A complete response with a JSON body."""

    status: int
    payload: Any
    headers: dict[str, str] = attrs.field(factory=dict)

    def body(self) -> bytes:
        return json.dumps(self.payload, ensure_ascii=False, separators=(",", ":")).encode()


@attrs.frozen(slots=True)
class StreamResponse:
    """A server-sent-events response; ``events`` yields framed events (``event: x\\ndata: y\\n\\n``)."""

    events: Iterable[bytes]
    status: int = 200
    headers: dict[str, str] = attrs.field(factory=dict)


Handler = Callable[[RecordedRequest], "JSONResponse | StreamResponse"]


@attrs.frozen(slots=True)
class Route:
    """``method`` and a regular expression that must match the whole path."""

    method: str
    pattern: str
    handler: Handler

    def matches(self, method: str, path: str) -> bool:
        return method == self.method and re.fullmatch(self.pattern, path) is not None


@attrs.frozen(slots=True)
class Fault:
    """One injected failure, consumed by the next request that reaches the server.

    Build them with the class methods: :meth:`http` (a vendor error status and body, e.g. 429 or 529),
    :meth:`delay` (hold the request, so a client timeout fires), :meth:`drop_connection` (close the socket
    without a response), :meth:`truncate_stream` (let the handler answer, but cut a streamed response
    after ``after_events`` events without closing the chunked body) and :meth:`hold_stream` (send the
    first events of a streamed response, then hold the rest until the test releases it).
    """

    kind: str
    status: int = 0
    payload: Any = None
    headers: dict[str, str] = attrs.field(factory=dict)
    seconds: float = 0.0
    after_events: int = 0
    release: threading.Event | None = None
    client_gone: threading.Event | None = None

    @classmethod
    def http(cls, status: int, payload: Any, headers: dict[str, str] | None = None) -> Fault:
        """Answer with HTTP ``status`` and the JSON ``payload`` (a vendor error envelope)."""
        return cls(kind="http", status=status, payload=payload, headers=dict(headers or {}))

    @classmethod
    def delay(cls, seconds: float) -> Fault:
        """Hold the request for ``seconds`` before handling it (for client timeouts)."""
        return cls(kind="delay", seconds=seconds)

    @classmethod
    def drop_connection(cls) -> Fault:
        """Close the socket without answering."""
        return cls(kind="drop")

    @classmethod
    def truncate_stream(cls, after_events: int) -> Fault:
        """Cut a streamed answer after ``after_events`` events, without ending the chunked body."""
        return cls(kind="truncate", after_events=after_events)

    @classmethod
    def hold_stream(
        cls,
        after_events: int,
        release: threading.Event,
        *,
        client_gone: threading.Event | None = None,
        seconds: float = 10.0,
    ) -> Fault:
        """Let the handler answer; send the first ``after_events`` events of its stream (flushed), then
        hold the rest until ``release`` is set (or ``seconds`` passed) and send it unchanged. If the client
        closes the connection while the rest is held, ``client_gone`` is set and nothing more is sent. A
        JSON (non-streamed) answer is sent as usual. Shows that a client sees the first events before the
        response has ended, and that it closes a stream it leaves early."""
        return cls(
            kind="hold", after_events=after_events, release=release, client_gone=client_gone, seconds=seconds
        )

    @classmethod
    def trailing(cls, data: bytes) -> Fault:
        """Send a streamed answer whole, then these bytes (e.g. ``b"data: {not json\\n\\n"``) before the
        body ends: garbage after the final event, as a broken proxy or server may add."""
        return cls(kind="trailing", payload=data)

    @classmethod
    def raw(cls, status: int, body: bytes, content_type: str = "application/json") -> Fault:
        """Answer with these exact bytes (e.g. malformed JSON) instead of calling the handler."""
        return cls(kind="raw", status=status, payload=body, headers={"content-type": content_type})


class _HTTPServer(ThreadingHTTPServer):
    """The threaded server of an :class:`EmulatorServer`: each connection on a daemon thread; ``busy`` holds
    the threads answering a request right now (:meth:`EmulatorServer.stop` may wait for them)."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        super().__init__(address, handler)
        self.busy: set[threading.Thread] = set()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Print the handler's traceback (as ``socketserver`` does), then the request is no longer busy."""
        try:
            super().handle_error(request, client_address)
        finally:
            self.busy.discard(threading.current_thread())


def _serve_until(httpd: ThreadingHTTPServer, stopping: threading.Event) -> None:
    """Accept connections on ``httpd`` (each served on its own thread) until ``stopping`` is set: the
    server's loop. It waits in ``accept`` without a timeout, so :meth:`EmulatorServer.stop` sets the flag and
    then connects once to end the wait at once; that connection sends nothing and its handler closes it."""
    while not stopping.is_set():
        httpd.handle_request()


class EmulatorServer:
    """A threaded HTTP server on a free loopback port; use it as a context manager.

    ``base_url`` is ``http://127.0.0.1:PORT`` (no trailing slash). ``requests`` lists every request
    received, faulted ones included, in arrival order. The address is ``127.0.0.1`` and a free port unless
    :meth:`bind` chose others before :meth:`start`.
    """

    def __init__(self, routes: Iterable[Route], *, name: str = "emulator") -> None:
        self.name = name
        self._routes = list(routes)
        self._faults: deque[Fault] = deque()
        self._lock = threading.Lock()
        self.requests: list[RecordedRequest] = []
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._address: tuple[str, int] = ("127.0.0.1", 0)
        #: seconds :meth:`now` runs ahead of the wall clock (:meth:`Emulator.advance`)
        self.clock_offset = 0.0

    def now(self) -> float:
        """The server's clock (seconds since the epoch): the wall clock plus :attr:`clock_offset`."""
        return time.time() + self.clock_offset

    # -- lifecycle ---------------------------------------------------------------------------------
    def bind(self, host: str = "127.0.0.1", port: int = 0) -> EmulatorServer:
        """Listen on ``host:port`` at the next :meth:`start` (``port=0``: a free port). IPv4 only."""
        if self._httpd is not None:
            raise RuntimeError(f"{self.name} is already running; bind() before start()")
        self._address = (host, port)
        return self

    def start(self) -> EmulatorServer:
        """Bind (a free port on 127.0.0.1 unless :meth:`bind` said otherwise) and serve on a background
        thread; returns the server."""
        server = self

        class _Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # small header/body writes must not wait for delayed ACKs (Nagle): ~40 ms per response
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:
                return None

            def date_time_string(self, timestamp: float | None = None) -> str:
                # the Date header a vendor sends is its clock: here the emulator's (advance() moves it)
                return super().date_time_string(server.now() if timestamp is None else timestamp)

            def _serve(self) -> None:
                # busy from a request's first line to its answer (or, when it raises, to the end of its
                # traceback: _HTTPServer.handle_error); an idle keep-alive connection is not busy
                busy = cast(_HTTPServer, self.server).busy
                busy.add(threading.current_thread())
                server._dispatch(self)
                busy.discard(threading.current_thread())

            do_GET = _serve
            do_POST = _serve
            do_DELETE = _serve
            do_PUT = _serve

        httpd = _HTTPServer(self._address, _Handler)
        self._httpd = httpd
        self._stopping = threading.Event()
        self._thread = threading.Thread(
            target=_serve_until, args=(httpd, self._stopping), name=self.name, daemon=True
        )
        self._thread.start()
        return self

    def stop(self, grace: float = 0.0) -> None:
        """Shut the server down, close its socket and join its thread. Returns as soon as the thread has
        ended: the stop flag is set, then one connection wakes the accept loop (:func:`_serve_until`), where
        ``serve_forever`` would notice a shutdown only at its next poll (50 ms here: one test in the
        suite's ~2,500 paid it per emulator). With ``grace``, the requests being answered get up to that
        many seconds to finish (their answer written, a handler's traceback printed) before it returns: a
        process that exits next (``reasonstate emulate``) loses nothing it was writing."""
        httpd, self._httpd = self._httpd, None
        thread, self._thread = self._thread, None
        if httpd is not None:
            self._stopping.set()
            if thread is not None and thread.is_alive():
                host, port = str(httpd.server_address[0]), int(httpd.server_address[1])
                # nothing listening any more (OSError): the loop has ended, or ends with its error
                with contextlib.suppress(OSError):
                    socket.create_connection(("127.0.0.1" if host == "0.0.0.0" else host, port), 5).close()
        if thread is not None:
            thread.join(timeout=5)
        if httpd is not None:
            end = time.monotonic() + grace
            for busy in list(httpd.busy):
                busy.join(max(0.0, end - time.monotonic()))
            httpd.server_close()

    def __enter__(self) -> EmulatorServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        """The bound loopback port; RuntimeError when the server is not running."""
        if self._httpd is None:
            raise RuntimeError(f"{self.name} is not running")
        return int(self._httpd.server_address[1])

    @property
    def host(self) -> str:
        """The host clients use: the bound address, or ``127.0.0.1`` when bound to every interface."""
        return "127.0.0.1" if self._address[0] in ("", "0.0.0.0") else self._address[0]

    @property
    def base_url(self) -> str:
        """``http://HOST:PORT`` (``127.0.0.1`` unless :meth:`bind` chose another host), the root every route
        is under."""
        return f"http://{self.host}:{self.port}"

    # -- faults and records --------------------------------------------------------------------------
    def inject(self, *faults: Fault) -> None:
        """Queue faults; each is consumed by one later request, in order."""
        with self._lock:
            self._faults.extend(faults)

    def clear_faults(self) -> None:
        """Drop the injected faults no request has consumed yet."""
        with self._lock:
            self._faults.clear()

    def add_route(self, route: Route) -> None:
        """Serve ``route`` too (routes are matched in the order they were added)."""
        self._routes.append(route)

    def _next_fault(self) -> Fault | None:
        with self._lock:
            return self._faults.popleft() if self._faults else None

    # -- request handling -----------------------------------------------------------------------------
    def _dispatch(self, h: BaseHTTPRequestHandler) -> None:
        length = int(h.headers.get("content-length") or 0)
        body = h.rfile.read(length) if length else b""
        split = urlsplit(h.path)
        recorded = RecordedRequest(
            method=h.command,
            path=split.path,
            query=parse_qs(split.query),
            headers={k.lower(): v for k, v in h.headers.items()},
            body=body,
        )
        with self._lock:
            self.requests.append(recorded)
        fault = self._next_fault()
        truncate_after: int | None = None
        hold = fault if fault is not None and fault.kind == "hold" else None
        trailing = bytes(fault.payload) if fault is not None and fault.kind == "trailing" else b""
        if fault is not None:
            if fault.kind == "http":
                self._send_json(h, JSONResponse(fault.status, fault.payload, fault.headers))
                return
            if fault.kind == "raw":
                _send_raw(h, fault.status, bytes(fault.payload), fault.headers)
                return
            if fault.kind == "delay":
                time.sleep(fault.seconds)
            elif fault.kind == "drop":
                _abort(h)
                return
            elif fault.kind == "truncate":
                truncate_after = fault.after_events
        route = next((r for r in self._routes if r.matches(h.command, split.path)), None)
        if route is None:
            self._send_json(h, JSONResponse(404, {"error": {"message": f"no route for {split.path}"}}))
            return
        try:
            response = route.handler(recorded)
        except Exception as exc:  # an emulator bug must be visible to the test, not hang it
            self._send_json(h, JSONResponse(500, {"error": {"message": f"emulator error: {exc!r}"}}))
            raise
        try:
            if isinstance(response, StreamResponse):
                self._send_stream(h, response, truncate_after, hold, trailing)
            else:
                self._send_json(h, response)
        except (BrokenPipeError, ConnectionResetError):
            h.close_connection = True  # the client gave up (e.g. its timeout fired): nothing to answer

    @staticmethod
    def _send_json(h: BaseHTTPRequestHandler, response: JSONResponse) -> None:
        body = response.body()
        h.send_response(response.status)
        h.send_header("content-type", "application/json")
        h.send_header("content-length", str(len(body)))
        for key, value in response.headers.items():
            h.send_header(key, value)
        h.end_headers()
        h.wfile.write(body)
        h.wfile.flush()

    @staticmethod
    def _send_stream(
        h: BaseHTTPRequestHandler,
        response: StreamResponse,
        truncate_after: int | None,
        hold: Fault | None = None,
        trailing: bytes = b"",
    ) -> None:
        h.send_response(response.status)
        h.send_header("content-type", "text/event-stream")
        h.send_header("cache-control", "no-cache")
        h.send_header("transfer-encoding", "chunked")
        for key, value in response.headers.items():
            h.send_header(key, value)
        h.end_headers()
        for sent, event in enumerate(_iter(response.events)):
            if truncate_after is not None and sent >= truncate_after:
                h.wfile.flush()
                _abort(h)
                return
            if hold is not None and sent == hold.after_events:
                h.wfile.flush()
                if not _held(h, hold):
                    return
            h.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
            h.wfile.flush()
        if trailing:
            h.wfile.write(b"%x\r\n%s\r\n" % (len(trailing), trailing))
        h.wfile.write(b"0\r\n\r\n")
        h.wfile.flush()


class Emulator:
    """The lifecycle every vendor emulator shares: one :class:`EmulatorServer` serving its routes.

    Use it as a context manager (or :meth:`start`/:meth:`stop`). ``base_url`` is the server root
    (``http://127.0.0.1:PORT``); ``sdk_path`` is what the vendor SDK's own ``base_url`` adds to it (``""``
    for Anthropic and Gemini, ``"/v1"`` for OpenAI's), and :meth:`_client_kwargs` the options of a real
    SDK client pointed there (``api_key="test-key"``, ``max_retries=0``; the caller's ``kw`` override).
    """

    sdk_path = ""

    def __init__(self, routes: Iterable[Route], *, name: str) -> None:
        self._server = EmulatorServer(routes, name=name)

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self: _E) -> _E:
        """Serve on a free loopback port (unless :meth:`EmulatorServer.bind` chose one); returns self."""
        self._server.start()
        return self

    def stop(self, grace: float = 0.0) -> None:
        """Stop serving (:meth:`EmulatorServer.stop`: ``grace``, seconds the requests being answered get
        to finish)."""
        self._server.stop(grace)

    def __enter__(self: _E) -> _E:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        """The server root, ``http://127.0.0.1:PORT`` (no ``sdk_path``)."""
        return self._server.base_url

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received, faulted and rejected ones included, in arrival order."""
        return self._server.requests

    @property
    def server(self) -> EmulatorServer:
        """The underlying :class:`EmulatorServer` (e.g. to :meth:`~EmulatorServer.bind` an address)."""
        return self._server

    # -- faults and clients ------------------------------------------------------------------------
    def inject(self, *faults: Fault) -> None:
        """Queue faults; each answers one later request, in order, before any validation."""
        self._server.inject(*faults)

    # -- the clock ----------------------------------------------------------------------------------
    def now(self) -> float:
        """The emulator's clock (seconds since the epoch): what its ``Date`` headers say and what its
        prompt-cache lifetimes are measured on."""
        return self._server.now()

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` pass on the emulator's clock at once (a test need not wait out a cache lifetime):
        later ``Date`` headers are that much later, and cache entries age by as much."""
        if not seconds >= 0:
            raise ValueError(f"advance() takes seconds >= 0, got {seconds!r}")
        self._server.clock_offset += seconds

    def _client_kwargs(self, kw: Mapping[str, Any]) -> dict[str, Any]:
        return {"base_url": self.base_url + self.sdk_path, "api_key": "test-key", "max_retries": 0, **kw}


class ScriptedEmulator(Emulator):
    """An emulator of a model API: what the model does comes from ``script``.

    ``script``: a :class:`~reasonstate.testing.script.Script`, an iterable of
    :class:`~reasonstate.testing.script.ModelAction` or a responder ``(request_json) -> ModelAction``.
    ``secret``: the HMAC key of what the emulator signs (bytes, or text taken as UTF-8; :data:`DEFAULT_SECRET`
    when None, so emulators built alike verify each other's signatures across processes and restarts, as
    one organisation's do; give another secret to stand for another organisation). ``api_key``: the key(s)
    accepted (:data:`API_KEYS` when None). ``models``: model ids accepted on top of the vendor's table
    (:meth:`knows_model`). ``transform``: applied to each
    successful response (:data:`Transform`). ``aliases``: the complete alias → model id table
    :meth:`resolve_model` reads (each vendor's emulator merges its defaults with the caller's entries
    before it gets here). Handlers run under ``_lock``, so concurrent requests see one consistent store,
    cache and script.
    """

    def __init__(
        self,
        routes: Iterable[Route],
        *,
        name: str,
        script: Script | Iterable[ModelAction] | Responder = (),
        secret: bytes | str | None = None,
        transform: Transform | None = None,
        aliases: Mapping[str, str] | None = None,
        api_key: str | Iterable[str] | None = None,
        known_models: Iterable[str] = (),
        models: Iterable[str] = (),
    ) -> None:
        super().__init__(routes, name=name)
        self.script = script if isinstance(script, Script) else Script(script)
        if secret is None:
            secret = DEFAULT_SECRET
        self.secret = secret.encode() if isinstance(secret, str) else bytes(secret)
        keys = API_KEYS if api_key is None else (api_key,) if isinstance(api_key, str) else tuple(api_key)
        #: the API keys this emulator accepts (anything else is the vendor's invalid-key error)
        self.api_keys: frozenset[str] = frozenset(keys)
        #: the model ids (and aliases) this emulator serves; any other is the vendor's unknown-model error
        self.models: frozenset[str] = frozenset(known_models) | frozenset(models) | frozenset(aliases or {})
        self.transform = transform
        #: alias → the model id the API answers with, as this emulator resolves them
        self.aliases: dict[str, str] = dict(aliases or {})
        self._lock = threading.RLock()

    def key_accepted(self, key: str) -> bool:
        """Whether ``key`` is one this emulator issued (:data:`API_KEYS` unless ``api_key=`` said others)."""
        return key in self.api_keys

    def knows_model(self, model: str) -> bool:
        """Whether ``model`` is served here: an id of the vendor's table, an alias, or one of ``models=``."""
        return model in self.models or self.resolve_model(model) in self.models

    def resolve_model(self, model: str) -> str:
        """The model id the API answers ``model`` with: the dated id for an alias, else ``model`` itself."""
        return self.aliases.get(model, model)

    def _transformed(self, payload: dict[str, Any]) -> dict[str, Any]:
        return self.transform(payload) if self.transform is not None else payload


def _send_raw(h: BaseHTTPRequestHandler, status: int, body: bytes, headers: dict[str, str]) -> None:
    h.send_response(status)
    for key, value in headers.items():
        h.send_header(key, value)
    h.send_header("content-length", str(len(body)))
    h.end_headers()
    h.wfile.write(body)
    h.wfile.flush()


def _held(h: BaseHTTPRequestHandler, hold: Fault) -> bool:
    """Wait for ``hold.release``; False (and ``client_gone`` set) when the client closed the connection
    meanwhile."""
    assert hold.release is not None
    deadline = time.monotonic() + hold.seconds
    while not hold.release.wait(0.01) and time.monotonic() < deadline:
        readable, _, _ = select.select([h.connection], [], [], 0)
        try:
            gone = bool(readable) and h.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            gone = True
        if gone:
            if hold.client_gone is not None:
                hold.client_gone.set()
            h.close_connection = True
            return False
    return True


def _iter(events: Iterable[bytes]) -> Iterator[bytes]:
    yield from events


def _abort(h: BaseHTTPRequestHandler) -> None:
    """Close the connection abruptly: the client sees a dropped connection, not a clean end."""
    h.close_connection = True
    try:
        h.wfile.flush()
        h.connection.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def sse_event(event: str | None, data: Any) -> bytes:
    """Frame one server-sent event; ``data`` is JSON-encoded unless it is already ``str``."""
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {text}\n\n".encode()
