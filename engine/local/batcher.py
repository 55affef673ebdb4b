"""Which turns decode together, and when: the engine thread's batch of concurrent turns.

A turn is admitted by a job on the engine thread: it is planned and prefilled there alone (as
before), then joins the batch as a row; a step job decodes every row by one token per pass
(engine/local/batch.py) until another job waits, then queues itself again, so a new turn's
prefill, or any other job, runs between steps. A turn that cannot batch (`batch_refusal`)
runs alone as before, in turn. A turn alone on the engine, with speculation on by default
(on a CPU), also decodes alone as before (one client sees exactly what it saw) until another
turn comes: then it leaves its speculative decoding after the token it is at and goes on as a
row (`TurnRun.decode(join=...)`); in a batch, speculation is off (4 clients are faster batched
than speculating one after another: bench/figures/concurrent.py). A row ends on its own (end
of sequence, Stop, max_tokens, the context limit) without disturbing the others.

At most MAX_ROWS rows decode at once; further turns wait, as do turns on a conversation
that already has a row (its cache is written by one turn at a time).

Imports no MLX (engine/local/backend.py imports it before OpenBLAS is preloaded): the modules that
do are imported on the engine thread, when a turn is admitted.
"""

import concurrent.futures
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine.errors import ChinwagError
from engine.log import report_bug
from engine.types import GenerationParams, Messages

if TYPE_CHECKING:
    from engine.local.session import OpenTurn, Session, TurnResult
    from engine.local.thread import EngineThread

# Each step copies every row's keys and values into the padded batch (transient memory: rows
# times the longest row, per layer), and every row waits for the slowest step: 8 keeps both
# bounded while still gaining (the starter on 2 cores: 5.1x one client's tokens/s with 8 rows).
MAX_ROWS = 8


@dataclass
class Request:
    """One chat turn asked of the engine: Session.chat's arguments and the future of its TurnResult."""

    conv_id: str
    messages: Messages
    params: GenerationParams
    should_stop: Callable[[], bool]
    emit: Callable[[Any], None]
    future: "concurrent.futures.Future[TurnResult]"


@dataclass
class Row:
    request: Request
    turn: "OpenTurn"


class Batcher:
    """Owns the rows and the waiting turns (engine thread only, but for `submit`'s count)."""

    def __init__(self, thread: "EngineThread", session: Callable[[], "Session"]) -> None:
        self._thread, self._session = thread, session
        self._lock = threading.Lock()
        self._live = 0  # turns submitted and not yet settled (counted on any thread)
        self.rows: list[Row] = []
        self._waiting: deque[Request] = deque()
        self._stepping = False  # a step job is queued
        self.peak_rows = 0  # the most rows one step has decoded (tests and figures read it)

    def submit(
        self,
        conv_id: str,
        messages: Messages,
        params: GenerationParams,
        should_stop: Callable[[], bool],
        emit: Callable[[Any], None],
    ) -> "concurrent.futures.Future[TurnResult]":
        """Any thread: run a turn; the future's result is its TurnResult (or what it raised)."""
        future: concurrent.futures.Future[TurnResult] = concurrent.futures.Future()
        with self._lock:
            self._live += 1
        self._thread.submit(self._admit, Request(conv_id, messages, params, should_stop, emit, future))
        return future

    # --- engine thread --------------------------------------------------------

    def _admit(self, request: Request) -> None:
        from engine.local.speculative import speculation_enabled

        session = self._session()
        with self._lock:
            alone = self._live == 1
        refusal = session.batch_refusal(request.conv_id, request.params)
        if refusal:
            args = (request.conv_id, request.messages, request.params, request.should_stop, request.emit)
            self._settle(request, session.chat, *args)
            return
        if len(self.rows) >= MAX_ROWS or any(row.request.conv_id == request.conv_id for row in self.rows):
            self._waiting.append(request)
            return
        solo = alone and not self.rows and speculation_enabled(request.params)
        try:
            turn = session.open_turn(
                request.conv_id, request.messages, request.params, request.should_stop, request.emit, batched=not solo
            )
        except BaseException as e:  # noqa: BLE001 - settled with it, as the job would be
            self._settle(request, _raise, e)
            return
        # Alone, it speculates as before, until another turn comes: then it goes on in the batch.
        if turn.run.start() and (not solo or turn.run.decode(join=self._others)):
            self.rows.append(Row(request, turn))
            session.caches.decoding.add(request.conv_id)  # another row's end must not evict this cache
            self._schedule()
        else:
            self._settle(request, session.close_turn, turn)

    def _others(self) -> bool:
        """Whether a turn other than the one decoding alone has come (its admission waits)."""
        with self._lock:
            return self._live > 1

    def _schedule(self) -> None:
        if not self._stepping:
            self._stepping = True
            self._thread.submit(self._steps)

    def _steps(self) -> None:
        """Step the batch until another job waits, then queue again (if rows remain)."""
        self._stepping = False
        while self.rows and not self._thread.waiting():
            self.step()
        if self.rows:
            self._schedule()

    def step(self) -> None:
        """One token for every row; the rows that end leave, and waiting turns are admitted."""
        rows = list(self.rows)
        self.peak_rows = max(self.peak_rows, len(rows))
        ended: list[Row] = []
        from engine.local import batch

        try:
            fed = batch.step(self._session().model, [row.turn.run for row in rows])
        except Exception as e:  # noqa: BLE001 - every row ends; the caches are repaired
            error = str(e) if isinstance(e, ChinwagError) else report_bug(e, "a batch of replies")
            for row in rows:
                row.turn.run.fail(e, error)
            ended = rows
        else:
            for row, tok in zip(rows, fed, strict=True):
                if row.turn.run.replay:  # emitted while it decoded alone
                    row.turn.run.replay = False
                    continue
                finish = row.turn.run.reply.push(tok)
                if finish is not None:
                    row.turn.run.ended(finish)
                    ended.append(row)
        for row in ended:
            self.rows.remove(row)
            self._session().caches.decoding.discard(row.request.conv_id)
            self._settle(row.request, self._session().close_turn, row.turn)
        if ended:
            self._admit_waiting()

    def _admit_waiting(self) -> None:
        """Queue the admission of the waiting turns that now fit (in order of arrival)."""
        busy = {row.request.conv_id for row in self.rows}
        room = MAX_ROWS - len(self.rows)
        kept: deque[Request] = deque()
        for request in self._waiting:
            if room > 0 and request.conv_id not in busy:
                busy.add(request.conv_id)
                room -= 1
                self._thread.submit(self._admit, request)
            else:
                kept.append(request)
        self._waiting = kept

    def drain(self) -> None:
        """Decode the rows to their ends here: before a job that must not interleave with them
        (a model load, a fork, forgetting a conversation, closing)."""
        while self.rows:
            self.step()

    def _settle(self, request: Request, fn: Callable[..., "TurnResult"], *args: Any) -> None:
        try:
            request.future.set_result(fn(*args))
        except BaseException as e:  # noqa: BLE001 - the caller gets it, as from a job
            if isinstance(e, Exception) and not isinstance(e, ChinwagError):
                report_bug(e, "a turn on the engine thread")
            request.future.set_exception(e)
        finally:
            with self._lock:
                self._live -= 1


def _raise(e: BaseException) -> "TurnResult":
    raise e
