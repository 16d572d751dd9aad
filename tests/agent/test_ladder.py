"""The attempt ladder: retry transient failures, fall back on others, stop on refusals."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import pytest
from pydantic import SecretStr

from agent.core.errors import (
    CredentialRejected,
    ModelsUnavailable,
    NonTransientModelError,
    QuotaExhausted,
    RoundFailed,
    Route,
    TransientModelError,
)
from agent.models.circuit import CircuitBreaker
from agent.models.contract import Model, ModelRequest, ModelResponse, UserMessage
from agent.models.function_model import FunctionModel, text_response
from agent.models.ladder import Answered, AttemptLadder, Outcome, RetryPolicy
from agent.models.providers.openai import OpenAIModel, OpenAIProvider
from tests.fakes.openai_api import Completion, OpenAIServer, error_reply

REQUEST = ModelRequest((UserMessage("hi"),))


class Recorder:
    """A fake sleep and attempt observer that record instead of waiting."""

    def __init__(self) -> None:
        self.delays: list[float] = []
        self.outcomes: list[tuple[str, int, Outcome]] = []

    async def sleep(self, delay: float) -> None:
        self.delays.append(delay)

    def observe(self, route: Route, outcome: Outcome) -> None:
        self.outcomes.append((route.model, route.slot, outcome))


def scripted(name: str, results: Iterable[Exception | str]) -> FunctionModel:
    """A model that raises or answers with each of `results` in turn."""
    queue = list(results)

    def answer(request: ModelRequest) -> ModelResponse:
        item = queue.pop(0)
        if isinstance(item, Exception):
            raise item
        return text_response(item, model=name)

    return FunctionModel(answer, name=f"function:{name}")


def ladder(
    *models: Model, recorder: Recorder, circuit: CircuitBreaker | None = None, attempts: int = 3
) -> AttemptLadder:
    return AttemptLadder(
        models,
        policy=RetryPolicy(attempts_per_slot=attempts, base_delay=1.0, max_delay=30.0),
        circuit=circuit,
        sleep=recorder.sleep,
        jitter=lambda: 1.0,
        on_attempt=recorder.observe,
    )


async def call(model: Model) -> str:
    return (await model.request(REQUEST)).text


def transient(retry_after: float | None = None) -> TransientModelError:
    return TransientModelError("HTTP 503", status_code=503, retry_after=retry_after)


async def test_success_on_first_try() -> None:
    """A healthy primary answers, is the only model called, and is named as the route."""
    recorder = Recorder()
    primary, fallback = scripted("a", ["hello"]), scripted("b", [])
    answered = await ladder(primary, fallback, recorder=recorder).run(call)
    assert answered == Answered("hello", Route("function", "a", 0))
    assert recorder.outcomes == [("a", 0, "ok")] and not fallback.requests


async def test_transient_failures_retry_with_exponential_backoff() -> None:
    """Transient errors retry the same slot after 1 s, then 2 s (jitter pinned at its top)."""
    recorder = Recorder()
    primary = scripted("a", [transient(), transient(), "third time"])
    assert (await ladder(primary, recorder=recorder).run(call)).value == "third time"
    assert recorder.delays == [1.0, 2.0]
    assert [o for *_, o in recorder.outcomes] == ["transient", "transient", "ok"]


def test_jitter_scales_backoff_between_half_and_full() -> None:
    """Jitter 0 halves the backoff, jitter 1 keeps it; the cap bounds it."""
    policy = RetryPolicy(base_delay=1.0, max_delay=30.0)
    assert policy.backoff(3, 0.0) == 4.0 and policy.backoff(3, 1.0) == 8.0
    assert policy.backoff(10, 1.0) == 30.0


async def test_retry_after_is_honoured_exactly() -> None:
    """A Retry-After the server sent is the delay, not the backoff."""
    recorder = Recorder()
    primary = scripted("a", [transient(retry_after=7.5), "ok"])
    await ladder(primary, recorder=recorder).run(call)
    assert recorder.delays == [7.5]


async def test_retry_after_beyond_the_cap_moves_on_without_waiting() -> None:
    """A Retry-After longer than the cap skips to the next slot instead of sleeping."""
    recorder = Recorder()
    primary, fallback = scripted("a", [transient(retry_after=3600)]), scripted("b", ["fb"])
    assert (await ladder(primary, fallback, recorder=recorder).run(call)).value == "fb"
    assert recorder.delays == []


async def test_all_slots_transiently_down_raises_models_unavailable() -> None:
    """When every slot stays transiently down the task is deferred, with the server's hint."""
    recorder = Recorder()
    primary = scripted("a", [transient(), transient()])
    fallback = scripted("b", [transient(retry_after=20), transient(retry_after=20)])
    with pytest.raises(ModelsUnavailable) as caught:
        await ladder(primary, fallback, recorder=recorder, attempts=2).run(call)
    assert caught.value.retry_after == 20
    assert recorder.delays == [1.0, 20]
    assert len(primary.requests) == 2 and len(fallback.requests) == 2


@pytest.mark.parametrize(
    "error", [NonTransientModelError("HTTP 400", status_code=400), RoundFailed("no control call")]
)
async def test_non_transient_and_round_failed_fall_back(error: Exception) -> None:
    """A 400 or a failed round burns the slot at once and the fallback answers, named as
    the route (slot 1)."""
    recorder = Recorder()
    primary, fallback = scripted("a", [error]), scripted("b", ["from fallback"])
    answered = await ladder(primary, fallback, recorder=recorder).run(call)
    assert answered == Answered("from fallback", Route("function", "b", 1))
    assert recorder.delays == [] and len(primary.requests) == 1
    assert recorder.outcomes == [("a", 0, "failed"), ("b", 1, "ok")]


async def test_non_transient_everywhere_reraises_the_last_error() -> None:
    """With every slot burnt, the last error itself is raised."""
    recorder = Recorder()
    last = NonTransientModelError("HTTP 404")
    primary, fallback = scripted("a", [RoundFailed("x")]), scripted("b", [last])
    with pytest.raises(NonTransientModelError) as caught:
        await ladder(primary, fallback, recorder=recorder).run(call)
    assert caught.value is last and caught.value.route == Route("function", "b", 1)


@pytest.mark.parametrize(
    "error",
    [
        CredentialRejected("refused", source="provider", status_code=401),
        CredentialRejected("refused", source="gateway", status_code=403),
        QuotaExhausted("no credit", status_code=429),
    ],
)
async def test_refusals_stop_at_once_without_fallback(error: Exception) -> None:
    """A credential refusal or exhausted quota is raised at once: no retry, no fallback."""
    recorder = Recorder()
    primary, fallback = scripted("a", [error]), scripted("b", ["never"])
    with pytest.raises(type(error)) as caught:
        await ladder(primary, fallback, recorder=recorder).run(call)
    assert caught.value.route == Route("function", "a", 0)  # type: ignore[attr-defined]
    assert not fallback.requests and recorder.delays == []


async def test_later_runs_fail_fast_while_the_circuit_is_open() -> None:
    """After a refusal the route is not called again until the cool-down passes."""
    now = [0.0]
    circuit = CircuitBreaker(cooldown=60, clock=lambda: now[0])
    recorder = Recorder()
    refused = CredentialRejected("refused", source="gateway", status_code=401)
    primary = scripted("a", [refused, "back"])
    runner = ladder(primary, recorder=recorder, circuit=circuit)
    with pytest.raises(CredentialRejected):
        await runner.run(call)
    with pytest.raises(CredentialRejected) as caught:
        await runner.run(call)
    assert caught.value.from_circuit and caught.value.source == "gateway"
    assert len(primary.requests) == 1 and recorder.outcomes[-1] == ("a", 0, "circuit_open")
    now[0] = 61.0
    assert (await runner.run(call)).value == "back"


async def test_unexpected_exceptions_propagate_untouched() -> None:
    """A bug in the attempt is not a model failure: it propagates, no retry, no fallback."""
    recorder = Recorder()
    fallback = scripted("b", ["x"])

    async def broken(model: Model) -> str:
        raise KeyError("bug")

    with pytest.raises(KeyError):
        await ladder(scripted("a", []), fallback, recorder=recorder).run(broken)
    assert recorder.outcomes == []


def test_an_empty_ladder_is_refused() -> None:
    """A ladder needs at least one model."""
    with pytest.raises(ValueError):
        AttemptLadder([])


# Over HTTP: the real provider, the fake server and the ladder together.


def _openai(server: OpenAIServer, slot: int) -> OpenAIModel:
    provider = OpenAIProvider(base_url=server.url, api_key=SecretStr("sk-test"))
    return OpenAIModel(f"gpt-{slot}", provider=provider, slot=slot)


async def _run_over_http(*replies: object, check: Callable[[OpenAIServer, Recorder], None]) -> None:
    recorder = Recorder()
    async with OpenAIServer() as server:
        server.script(*replies)  # type: ignore[arg-type]
        models = [_openai(server, 0), _openai(server, 1)]
        try:
            await ladder(*models, recorder=recorder).run(call)
        except Exception as exc:
            recorder.outcomes.append((type(exc).__name__, -1, "failed"))
        finally:
            for model in models:
                await model.aclose()
        check(server, recorder)


async def test_retry_after_header_over_http() -> None:
    """A 429 with `Retry-After: 2` from the server makes the ladder sleep exactly 2 s."""

    def check(server: OpenAIServer, recorder: Recorder) -> None:
        assert recorder.delays == [2.0]
        assert [r.body["model"] for r in server.requests] == ["gpt-0", "gpt-0"]

    rate_limited = error_reply(
        429, "slow down", "requests", "rate_limit_exceeded", {"Retry-After": "2"}
    )
    await _run_over_http(rate_limited, Completion(text="ok"), check=check)


async def test_fallback_on_400_over_http() -> None:
    """A 400 from the primary makes the fallback model answer."""

    def check(server: OpenAIServer, recorder: Recorder) -> None:
        assert [r.body["model"] for r in server.requests] == ["gpt-0", "gpt-1"]

    await _run_over_http(error_reply(400, "bad"), Completion(text="ok"), check=check)


@pytest.mark.parametrize(
    "reply",
    [
        error_reply(401, "Incorrect API key provided", code="invalid_api_key"),
        error_reply(403, "forbidden", type="permission_error"),
        error_reply(429, "quota", "insufficient_quota", "insufficient_quota"),
    ],
)
async def test_no_fallback_on_refusal_over_http(reply: object) -> None:
    """A 401, 403 or exhausted quota never reaches the fallback model."""

    def check(server: OpenAIServer, recorder: Recorder) -> None:
        assert [r.body["model"] for r in server.requests] == ["gpt-0"]
        assert recorder.delays == []

    await _run_over_http(reply, Completion(text="never"), check=check)
