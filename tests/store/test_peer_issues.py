"""One test per peer issue named in issue #22: what went wrong in another agent framework's session store,
replayed against reasonstate's store on every backend (SQLite always; PostgreSQL and Redis on the real
servers of tests/store/services.py, each test in a fresh schema / key prefix).

Each docstring names the source issue, what went wrong there, and the guard here that makes it impossible
(reverting that guard makes the test fail). Sessions are real: the vendor SDKs over HTTP against the strict
emulators, which refuse a replay with a missing, moved or edited payload. "The next request equals the
never-stopped session's" is checked byte for byte on the wire: the writer, still in memory, sends the same
turn after the loaded session did (its append then conflicts, as it must), and the two HTTP bodies the
emulator received are compared.
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

import reasonstate as rs
from reasonstate.errors import SessionConflict, StoreError
from reasonstate.journal import replay
from reasonstate.store import SCHEMA_VERSION, Entry
from reasonstate.testing.anthropic import AnthropicEmulator
from reasonstate.testing.gemini import GeminiEmulator
from reasonstate.testing.openai_responses import OpenAIResponsesEmulator
from tests import conftest as anthropic_case
from tests import test_session_gemini as gemini_case
from tests import test_session_openai_responses as responses_case
from tests.store._peer_worker import serve
from tests.store._processes import worker_context
from tests.store.backends import BACKENDS, Backend, open_backend

ROOT = Path(__file__).resolve().parents[2]
KEY_1 = bytes(range(32))
KEY_2 = bytes(range(100, 132))


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    with open_backend(request.param, tmp_path) as b:
        yield b


# -- helpers -------------------------------------------------------------------------------------------------
def wire(request: rs.session.VendorRequest) -> str:
    """A request's keyword arguments as the JSON the SDK is given (key order kept)."""
    return json.dumps(request.kwargs, ensure_ascii=False, default=str)


def anthropic_session(emu: AnthropicEmulator, **kw: Any) -> rs.Session:
    options: dict[str, Any] = {
        "system": anthropic_case.SYSTEM,
        "tools": [anthropic_case.WEATHER, anthropic_case.CLOCK],
        "max_tokens": 4096,
        "thinking": anthropic_case.THINKING,
    }
    return rs.Session(emu.client(), model=anthropic_case.MODEL, **options, **kw)


def users(session: rs.Session | rs.AsyncSession) -> list[str | None]:
    return [t.user for t in session.history.turns]


def assert_one_line(store: Any, session_id: str) -> list[Entry]:
    """The stored log has no fork: one checkpoint, then deltas numbered on without a gap or a repeat,
    replaying to one line of turns numbered 0, 1, 2, ..."""
    entries: list[Entry] = store.read(session_id)
    assert [e.seq for e in entries] == list(range(1, len(entries) + 1))
    assert [e.kind for e in entries] == ["checkpoint"] + ["delta"] * (len(entries) - 1)
    assert store.version(session_id) == len(entries)
    turns = replay(entries).layers.history.turns
    assert [t.index for t in turns] == list(range(len(turns)))
    return entries


def same_next_request(
    writer: rs.Session,
    loaded: rs.Session,
    emu: Any,
    text: str,
    drive: Callable[[rs.Session, str], Any],
) -> None:
    """``loaded`` continues with ``drive(loaded, text)`` (the strict emulator accepts every replay), and its
    first request is, byte for byte on the wire, the one the never-stopped ``writer`` sends for ``text``."""
    assert wire(loaded.next_request(text)) == wire(writer.next_request(text))
    first = len(emu.requests)
    drive(loaded, text)
    assert all(r.body for r in emu.requests[first:])
    with pytest.raises(SessionConflict):  # the writer is one version behind now: its append is refused
        writer.send(text)
    assert emu.requests[-1].body == emu.requests[first].body


class Outputs:
    """The emulator's ``transform`` hook: each response's output item ids, in order, as received."""

    def __init__(self) -> None:
        self.items: list[list[tuple[str, str]]] = []
        self.sizes: list[int] = []

    def __call__(self, response: dict[str, Any]) -> dict[str, Any]:
        self.items.append([(str(i["type"]), str(i["id"])) for i in response.get("output", [])])
        self.sizes.append(len(json.dumps(response, ensure_ascii=False, separators=(",", ":"))))
        return response


# -- openai/openai-agents-python#1900 ------------------------------------------------------------------------
def test_openai_agents_python_1900_items_written_in_one_millisecond_keep_their_order(
    backend: Backend,
) -> None:
    """openai/openai-agents-python#1900: ``SQLAlchemySession.get_items`` read items back inconsistently when
    two were logged in the same millisecond: a reasoning item and the message after it came back in either
    order, and the Responses API refused the next request (``Item 'msg_…' of type 'message' was provided
    without its required 'reasoning' item``).

    Here four OpenAI Responses sessions (reasoning items, parallel function calls, encrypted content)
    commit bursts of steps concurrently into one store, many entries per millisecond. Each one loaded
    back replays its reasoning items in the order of the responses, each immediately followed by the
    items that followed it when it was received; the strict emulator accepts the continuation, and the
    next request is the never-stopped session's. Guard: entries are keyed and read by ``(session_id,
    seq)``, never by time, and ``replay`` refuses a log whose seqs skip or go back."""
    store = backend.open()
    n = 4
    with ExitStack() as stack:
        outputs = [Outputs() for _ in range(n)]
        script = [*responses_case.chain(), responses_case.answer(0)] * 3 + responses_case.chain() * 2
        emus = [stack.enter_context(OpenAIResponsesEmulator(script, transform=o)) for o in outputs]
        writers: list[rs.Session] = []
        errors: list[BaseException] = []
        barrier = threading.Barrier(n)

        def work(k: int) -> None:
            try:
                session = responses_case.make_session(emus[k], store=store, session_id=f"s{k}")
                writers.append(session)
                barrier.wait(timeout=30)
                for i in range(3):
                    responses_case.run_chain(session, f"Question {i}: Paris or Rome?")
                    session.send(f"Follow-up {i}")
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(k,)) for k in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        for writer in writers:
            sid = writer.session_id
            assert sid is not None
            k = int(sid[1:])
            entries = assert_one_line(backend.open(), sid)
            assert len(entries) == 1 + 3 * 4  # the checkpoint, then one delta per commit
            loaded = rs.Session.load(backend.open(), sid, emus[k].client())
            assert loaded.history == writer.history
            assert loaded.continuation == writer.continuation
            first, made = len(emus[k].requests), len(writer.execution)
            same_next_request(writer, loaded, emus[k], "Question 3: Paris or Rome?", responses_case.run_chain)
            sent = json.loads(emus[k].requests[first].body)["input"]
            ids = [item.get("id") for item in sent]
            received = [o for o in outputs[k].items[:made] if o and o[0][0] == "reasoning"]
            assert len(received) == 3 * 4
            assert [i for i in ids if i and i.startswith("rs_")] == [o[0][1] for o in received]
            for output in received:  # each reasoning item, then what followed it in its own response
                at = ids.index(output[0][1])
                assert ids[at : at + len(output)] == [item_id for _, item_id in output]


# -- openai/openai-agents-python#4205 and #4988 --------------------------------------------------------------
@pytest.mark.parametrize("workers", ["threads", "processes"])
def test_openai_agents_python_4205_4988_concurrent_workers_never_take_one_version_twice(
    backend: Backend, workers: str
) -> None:
    """openai/openai-agents-python#4205 (``SQLAlchemySession``) and #4988 (``OpenAIConversationsSession``):
    ``pop_item`` picked the newest item, read it and deleted it in separate steps, so concurrent callers
    were handed the same item while the items no caller claimed stayed behind.

    Here four workers (threads, or processes each opening its own store) load one session at the same
    version and then send their messages as fast as they can, reloading after every conflict. Exactly one
    append wins each version; every loser gets :class:`SessionConflict` carrying the reply it paid for
    (kept in its stale object); the stored history holds every message exactly once, in version order.
    Guard: the compare-and-set of ``Store.append`` (remove it and two workers write on one version)."""
    k, m = 4, 3
    with AnthropicEmulator(lambda request: anthropic_case.answer(0)) as emu:
        origin = anthropic_session(emu, store=backend.open(), session_id="shared")
        origin.send("hello")
        results: Any
        if workers == "threads":
            results, barrier = queue.Queue(), threading.Barrier(k)
            runs: list[Any] = [
                threading.Thread(
                    target=serve, args=(backend.spec, emu.base_url, "shared", i, m, barrier, results)
                )
                for i in range(k)
            ]
        else:
            ctx = worker_context()
            results, barrier = ctx.Queue(), ctx.Barrier(k)
            runs = [
                ctx.Process(target=serve, args=(backend.spec, emu.base_url, "shared", i, m, barrier, results))
                for i in range(k)
            ]
        for r in runs:
            r.start()
        outcomes: list[tuple[Any, ...]] = []
        wins = 0
        while wins < k * m:
            outcome = results.get(timeout=120)
            outcomes.append(outcome)
            wins += outcome[0] == "won"
        for r in runs:
            r.join(timeout=60)
            if workers == "processes":
                assert r.exitcode == 0
        won = sorted((o for o in outcomes if o[0] == "won"), key=lambda o: o[3])
        lost = [o for o in outcomes if o[0] == "conflict"]
        assert [o[3] for o in won] == list(range(3, 3 + k * m))  # one commit per version, none skipped
        assert len(lost) >= k - 1  # the first round: one of the four wins, three lose
        for _, _, _, expected, found, reply_text, kept in lost:
            assert found > expected
            assert reply_text == "Follow-up answer 0."  # the reply paid for rides on the conflict
            assert kept  # and stays committed in the loser's (stale) object
        stored = rs.Session.load(backend.open(), "shared", emu.client())
        texts = users(stored)
        assert texts == ["hello", *(o[2] for o in won)]
        assert not [t for t, n in Counter(texts).items() if n > 1]
        assert set(texts) == {"hello"} | {f"worker {i} message {j}" for i in range(k) for j in range(m)}
        assert_one_line(backend.open(), "shared")


# -- langchain-ai/langgraph#8796 -----------------------------------------------------------------------------
def test_langgraph_8796_two_workers_on_one_version_do_not_fork_the_history(backend: Backend) -> None:
    """langchain-ai/langgraph#8796: a checkpointer passing the conformance suite still accepted two
    concurrent writers on one thread: both wrote from the same checkpoint and both succeeded, the
    checkpoint chain forked, and one committed checkpoint became unreachable from the final tip.

    Here two workers load the same version and both send; the first append wins, the second writes
    nothing (:class:`SessionConflict` with its reply), and its stale object sends nothing more. The
    winner goes on through a tool chain; the stored log is one line (versions consecutive, one checkpoint,
    one history) holding none of the loser's turn. Guard: every append names the version it was built on,
    and the store refuses any other."""
    chain = anthropic_case.three_step_chain()
    script = [anthropic_case.answer(0), chain[0], anthropic_case.answer(9), *chain[1:]]
    with AnthropicEmulator(script) as emu:
        origin = anthropic_session(emu, store=backend.open(), session_id="thread")
        origin.send("hello")
        a = rs.Session.load(backend.open(), "thread", emu.client())
        b = rs.Session.load(backend.open(), "thread", emu.client())
        assert a.version == b.version == 2
        reply = a.send("worker a: Paris or Rome?")
        assert reply.tool_calls
        with pytest.raises(SessionConflict) as info:
            b.send("worker b: something else")
        assert (info.value.expected, info.value.found) == (2, 3)
        assert isinstance(info.value.reply, rs.Reply) and info.value.reply.text
        sent = len(emu.requests)
        with pytest.raises(SessionConflict):
            b.send("worker b again")
        with pytest.raises(SessionConflict):
            b.flush()
        assert len(emu.requests) == sent  # nothing sent from the stale object
        while reply.tool_calls:
            reply = a.send_tool_results({c.id: {"city": c.arguments["city"]} for c in reply.tool_calls})
        entries = assert_one_line(backend.open(), "thread")
        assert len(entries) == 1 + 1 + 3
        assert not any(b"worker b" in body for _, _, body in backend.stored("thread"))
        stored = rs.Session.load(backend.open(), "thread", emu.client())
        assert users(stored) == ["hello", "worker a: Paris or Rome?"]
        assert stored.history == a.history and stored.execution == a.execution


# -- google/adk-python#4751 ----------------------------------------------------------------------------------
def test_adk_python_4751_a_stale_session_object_cannot_continue(backend: Backend) -> None:
    """google/adk-python#4751: ``DatabaseSessionService.append_event`` stopped refusing a stale session and
    instead reloaded its state and went on writing; two ``run_async`` calls on one session then
    interleaved their events, and the corrupted history was fed to the model on every later turn.

    Here a worker holds a loaded session while another worker goes on for a tool chain and an answer.
    The stale object's next call is refused at its append (:class:`SessionConflict`, the reply on it);
    from then on it sends nothing, and ``flush()`` after a local change is refused too. The stored
    history is the other worker's, intact; a reload gives the newest, whose next request is the other
    worker's. Guard: the version check of every append (and ``_check_fresh`` on a stale object)."""
    script = [*anthropic_case.three_step_chain(), anthropic_case.answer(1), anthropic_case.answer(2)]
    script += [anthropic_case.answer(3), anthropic_case.answer(4)]
    with AnthropicEmulator(script) as emu:
        origin = anthropic_session(emu, store=backend.open(), session_id="conv")
        stale = rs.Session.load(backend.open(), "conv", emu.client())
        other = rs.Session.load(backend.open(), "conv", emu.client())
        anthropic_case.run_chain(other, "Paris or Rome?")
        other.send("Thanks")
        before = backend.stored("conv")
        with pytest.raises(SessionConflict) as info:
            stale.send("an old worker's question")
        assert (info.value.expected, info.value.found) == (1, 5)
        assert isinstance(info.value.reply, rs.Reply)
        sent = len(emu.requests)
        with pytest.raises(SessionConflict):
            stale.send("and again")
        stale_origin = origin  # the creator's object is as stale: it is at version 1 as well
        stale_origin.change_prefix(system="Another system prompt, set by a stale worker.")
        with pytest.raises(SessionConflict):
            stale_origin.flush()
        assert len(emu.requests) == sent
        assert backend.stored("conv") == before  # intact, byte for byte
        assert_one_line(backend.open(), "conv")
        newest = rs.Session.load(backend.open(), "conv", emu.client())
        assert users(newest) == ["Paris or Rome?", "Thanks"]
        assert newest.history == other.history and newest.execution == other.execution
        same_next_request(other, newest, emu, "One more question", lambda s, t: s.send(t))


# -- google/adk-python#3272 and #3681 ------------------------------------------------------------------------
def test_adk_python_3272_3681_migrations_keep_stored_sessions(backend: Backend) -> None:
    """google/adk-python#3272 and #3681: schema upgrades broke existing tables; after an upgrade (1.17 to
    1.19 in #3681) opening a session failed with ``column events.input_transcription does not exist``
    and no session could be created.

    Here a store is created and holds a session mid-conversation; ``migrate()`` runs again on the same
    handle, on a new handle and in a new process: every stored byte is unchanged and the session loads
    and continues byte-identically. A schema newer than this reasonstate's is refused by every way of
    opening, and left untouched (the store-level twins, on each backend:
    ``test_a_newer_schema_is_refused_and_left_alone`` in tests/store/test_sqlite_store.py,
    test_postgres_store.py and test_redis_store.py). Guard: migrations only run the steps after the
    stored version, and a newer version is refused before any statement."""
    script = [*anthropic_case.three_step_chain(), anthropic_case.answer(1), anthropic_case.answer(2)]
    with AnthropicEmulator(script) as emu:
        store = backend.open()
        writer = anthropic_session(emu, store=store, session_id="kept")
        anthropic_case.run_chain(writer)
        before = backend.stored("kept")
        assert store.migrate() == SCHEMA_VERSION
        assert store.migrate() == SCHEMA_VERSION
        assert backend.open().migrate() == SCHEMA_VERSION
        code = (
            "import json, sys\n"
            "from tests.store.backends import open_spec\n"
            "store = open_spec(json.loads(sys.argv[1]))\n"
            "print(store.migrate())\n"
            "store.close()\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", code, json.dumps(backend.spec)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == str(SCHEMA_VERSION)
        assert backend.stored("kept") == before
        assert backend.schema_version() == SCHEMA_VERSION

        backend.set_schema_version(SCHEMA_VERSION + 1)  # a newer reasonstate migrated this store
        for options in ({}, {"migrate": False}):
            with pytest.raises(StoreError):
                backend.open(**options)
        with pytest.raises(StoreError, match="newer"):
            store.migrate()  # a handle opened before: its migrate() refuses too
        assert backend.schema_version() == SCHEMA_VERSION + 1  # refused, not "fixed" back
        backend.set_schema_version(SCHEMA_VERSION)
        assert backend.stored("kept") == before

        loaded = rs.Session.load(backend.open(), "kept", emu.client())
        assert loaded.history == writer.history and loaded.execution == writer.execution
        same_next_request(writer, loaded, emu, "Follow-up", lambda s, t: s.send(t))


# -- langchain-ai/langgraphjs#1138 ---------------------------------------------------------------------------
def test_langgraphjs_1138_a_long_session_grows_by_its_turns_not_by_its_length(backend: Backend) -> None:
    """langchain-ai/langgraphjs#1138: checkpoints grew to hundreds of MB: what a long thread stored grew
    with its length, not with what each step added.

    Here a 150-turn session (thinking, signatures) is persisted: after its first checkpoint every commit is
    one delta whose size does not grow with the turn number (the last 30 turns' deltas are the size of
    turns 10 to 40's), the stored bytes grow linearly, and the whole log is at most 1.5x the bytes
    received from the vendor (issue 22's target; each delta is deflated against the one before).
    Guard: ``journal.delta_body`` writes only what a commit added (a
    checkpoint per commit, or a delta repeating earlier turns, fails every assertion here)."""
    turns = 150
    received = Outputs()
    with AnthropicEmulator(lambda request: anthropic_case.answer(7), transform=received) as emu:
        session = anthropic_session(emu, store=backend.open(), session_id="long")
        totals = {}
        for i in range(turns):
            session.send(f"Turn {i:03d}: and what about tomorrow?")
            if i + 1 in (50, 100, 150):
                totals[i + 1] = sum(len(body) for _, _, body in backend.stored("long"))
        stored = backend.stored("long")
        assert [kind for _, kind, _ in stored] == ["checkpoint"] + ["delta"] * turns
        sizes = [len(body) for _, _, body in stored[1:]]
        early, late = sizes[10:40], sizes[-30:]
        assert sum(late) / len(late) <= 1.1 * sum(early) / len(early)
        assert max(late) <= 1.2 * max(early)
        assert totals[150] - totals[100] <= 1.1 * (totals[100] - totals[50])  # linear, not quadratic
        content = sum(received.sizes) + sum(len(t.user or "") for t in session.history.turns)
        assert totals[150] <= 1.5 * content, (totals[150], content)
        loaded = rs.Session.load(backend.open(), "long", emu.client())
        assert loaded.history == session.history
        assert wire(loaded.next_request("Turn 150")) == wire(session.next_request("Turn 150"))


# -- mastra-ai/mastra#23433 ----------------------------------------------------------------------------------
def test_mastra_23433_gemini_thought_signatures_stored_in_postgres_are_replayed(backend: Backend) -> None:
    """mastra-ai/mastra#23433: a Gemini 3 agent with PostgreSQL-backed memory stored the signed reasoning
    of a tool-calling turn but did not send it back on the next request, which Gemini refused
    (``Corrupted thought signature.``); the thread could not continue.

    Here a Gemini 3 session (real google-genai client) runs a signed function-call chain persisted in the
    store (PostgreSQL among the backends), and a fresh session loaded from it on a fresh client continues:
    the strict emulator, which verifies every signature, accepts the replay; every signature received is
    sent back byte for byte, in order; the next request is the never-stopped session's, on the wire.
    Guard: payloads are stored as the exact bytes received and verified by digest on load."""
    recorder = gemini_case.Recorder()
    script = [*gemini_case.chain(), gemini_case.answer(1), *gemini_case.chain(), gemini_case.answer(2)]
    with GeminiEmulator(script, transform=recorder) as emu:
        writer = gemini_case.make_session(emu, store=backend.open(), session_id="gemini")
        gemini_case.run_chain(writer)
        writer.send("Thanks")
        received = [
            gemini_case.signature_bytes(p)
            for r in recorder.responses
            for p in r["candidates"][0]["content"]["parts"]
            if p.get("thoughtSignature")
        ]
        assert len(received) >= 3 and all(received)
        loaded = rs.Session.load(backend.open(), "gemini", emu.client())
        assert loaded.history == writer.history and loaded.execution == writer.execution
        first = len(emu.requests)
        same_next_request(writer, loaded, emu, "And Madrid or Lisbon?", gemini_case.run_chain)
        sent = json.loads(emu.requests[first].body)
        replayed = [
            gemini_case.signature_bytes(p)
            for c in sent["contents"]
            if c.get("role") == "model"
            for p in c["parts"]
            if p.get("thoughtSignature")
        ]
        assert replayed == received


# -- openai/openai-agents-python#5005 ------------------------------------------------------------------------
def test_openai_agents_python_5005_a_wrong_key_deletes_nothing(backend: Backend) -> None:
    """openai/openai-agents-python#5005: an ``EncryptedSession`` configured with the wrong key showed an
    empty history, and one ``pop_item()`` then deleted every ciphertext item: restoring the right key
    could not bring the conversation back.

    Here a session persisted with ``encryption_key=K1`` is loaded through ``Session.load`` with ``K2``
    (and with no key): a typed :class:`StoreError` naming the key; creating a session on the same id with
    ``K2`` is a :class:`SessionConflict` that writes nothing. Every stored byte is still there, the session
    still listed at its version; loading with ``K1`` works and continues byte-identically. (The store-level
    twin is ``test_encrypted_bodies_need_their_key_and_a_wrong_key_deletes_nothing`` in
    tests/store/conformance.py.) Guard: a body that does not open is an error, never a reason to write."""
    script = [*anthropic_case.three_step_chain(), anthropic_case.answer(1), anthropic_case.answer(2)]
    with AnthropicEmulator(script) as emu:
        writer = anthropic_session(emu, store=backend.open(encryption_key=KEY_1), session_id="secret")
        anthropic_case.run_chain(writer, "Paris or Rome: which is warmer?")
        before = backend.stored("secret")
        assert len(before) == 4
        assert not any(b"Paris" in body for _, _, body in before)  # sealed at rest
        with pytest.raises(StoreError, match="encryption key") as info:
            rs.Session.load(backend.open(encryption_key=KEY_2), "secret", emu.client())
        assert not isinstance(info.value, SessionConflict)
        with pytest.raises(StoreError, match="encrypt"):
            rs.Session.load(backend.open(), "secret", emu.client())
        with pytest.raises(SessionConflict):
            anthropic_session(emu, store=backend.open(encryption_key=KEY_2), session_id="secret")
        assert backend.stored("secret") == before
        listed = backend.open().sessions()
        assert [(i.session_id, i.version) for i in listed] == [("secret", 4)]
        loaded = rs.Session.load(backend.open(encryption_key=KEY_1), "secret", emu.client())
        assert loaded.history == writer.history and loaded.execution == writer.execution
        same_next_request(writer, loaded, emu, "Thanks", lambda s, t: s.send(t))
        assert backend.stored("secret")[:4] == before and len(backend.stored("secret")) == 5
