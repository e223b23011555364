"""Any OpenAI-compatible Chat Completions server (vLLM, Ollama, llama.cpp, OpenAI) over httpx."""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import time
from collections.abc import Iterator
from typing import Any

import httpx

from app.errors import (
    CONTEXT_LENGTH_EXCEEDED,
    MODEL_NOT_FOUND,
    MODEL_RATE_LIMITED,
    MODEL_REFUSED_PROMPT,
    UpstreamError,
)
from app.keepalive import KEEPALIVE_EXPIRY_SECONDS
from app.protocol.response import InputTokensDetails, OutputTokensDetails, Usage
from app.providers.chunks import (
    Chunk,
    Finish,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    UsageReport,
)
from app.providers.http11 import lean_mounts
from app.providers.translate import ModelRequest, encode_chat_body

logger = logging.getLogger(__name__)

_RETRYABLE_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})
_JSON = {"Content-Type": "application/json"}


def model_http_client(
    *, api_key: str | None = None, timeout: httpx.Timeout | None = None, lean_http: bool = True
) -> httpx.Client:
    """The httpx client a provider calls its model server with.

    ``lean_http`` (``ANTWORT_LEAN_HTTP``): plain-HTTP model servers are read through
    :class:`app.providers.http11.Http11Transport`, a cheaper wire per token; off, and for
    HTTPS, through httpx's own transport.
    """
    return httpx.Client(
        timeout=timeout or httpx.Timeout(300.0, connect=10.0),
        headers={"Authorization": f"Bearer {api_key}"} if api_key else {},
        limits=httpx.Limits(
            max_connections=256,
            max_keepalive_connections=64,
            keepalive_expiry=KEEPALIVE_EXPIRY_SECONDS,
        ),
        mounts=lean_mounts() if lean_http else None,
    )


class ChatCompletionsProvider:
    """Streams one model call and yields provider-neutral chunks.

    Retries happen only before the first byte of an answer arrives: a call that failed halfway
    cannot be retried without repeating what the client already saw.

    A model that refuses the request with ``reasoning_effort`` in it (Ollama: "does not support
    thinking") is asked again without it, once; the provider then leaves the field out for that
    model (:attr:`refuses_effort`).
    """

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str | None = None,
        client: httpx.Client | None = None,
        max_retries: int = 2,
        retry_max_wait: float = 20.0,
        timeout: httpx.Timeout | None = None,
    ):
        self.base_url = base_url.rstrip("/")
        self.max_retries = max_retries
        self.retry_max_wait = retry_max_wait
        self._client = client or model_http_client(api_key=api_key, timeout=timeout)
        self.refuses_effort: set[str] = set()
        """Models that refused a request with ``reasoning_effort`` and took it without."""

    def close(self) -> None:
        """Release pooled connections."""
        self._client.close()

    def list_models(self) -> list[dict[str, Any]]:
        """``GET /models`` of the model server."""
        try:
            response = self._client.get(f"{self.base_url}/models")
            response.raise_for_status()
            data = response.json().get("data", [])
        except (httpx.HTTPError, ValueError) as exc:
            raise UpstreamError(
                f"Model server at {self.base_url} did not list models: {exc}"
            ) from exc
        return [model for model in data if isinstance(model, dict)]

    def stream(self, request: ModelRequest) -> Iterator[Chunk]:
        """Call the model and yield its answer as it arrives."""
        if "reasoning_effort" in request.params and request.model in self.refuses_effort:
            request = _without_effort(request)
        if "reasoning_effort" not in request.params:
            yield from self._stream(request)
            return
        try:
            yield from self._stream(request)
        except RequestRefusedError as refused:  # before any answer: nothing was yielded
            if refused.code != MODEL_REFUSED_PROMPT:
                raise  # refused for its length or its model: the effort is not what it refused
            try:
                yield from self._stream(_without_effort(request))
            except RequestRefusedError:
                raise refused from None  # refused for another reason: say the first one
            logger.warning(
                "model %s refused reasoning_effort (%s); sending it without from now on",
                request.model,
                refused.message,
            )
            self.refuses_effort.add(request.model)

    def _stream(self, request: ModelRequest) -> Iterator[Chunk]:
        body = encode_chat_body(request)
        attempt = 0
        while True:
            try:
                yield from self._stream_once(body)
                return
            except _Retry as retry:
                attempt += 1
                if attempt > self.max_retries:
                    raise UpstreamError(retry.message, code=retry.code) from retry
                wait = min(retry.wait, self.retry_max_wait)
                logger.warning("model call failed (%s); retry %d in %.1fs", retry, attempt, wait)
                time.sleep(wait)

    def _stream_once(self, body: bytes) -> Iterator[Chunk]:
        url = f"{self.base_url}/chat/completions"
        has_yielded = False
        try:
            with self._client.stream("POST", url, content=body, headers=_JSON) as response:
                if response.status_code != 200:
                    _raise_for_status(response)
                chunks = (
                    _parse_completion(response)
                    if _is_json(response)
                    else _parse_stream(_sse_data(_body(response)))
                )
                for chunk in chunks:
                    has_yielded = True
                    yield chunk
        except httpx.TransportError as exc:
            if has_yielded:  # a retry would repeat what the caller already has
                raise UpstreamError(
                    f"Model server at {self.base_url} broke off its answer: {exc}"
                ) from exc
            raise _Retry(f"Model server at {self.base_url} is unreachable: {exc}", 0.5) from exc


class RequestRefusedError(UpstreamError):
    """The model server refused the request as it was (400, 422, or 404 for its model).

    No retry helps. Its code says why, as OpenAI's server would (:func:`_refusal_code`).
    """


def _without_effort(request: ModelRequest) -> ModelRequest:
    params = {k: v for k, v in request.params.items() if k != "reasoning_effort"}
    return dataclasses.replace(request, params=params)


class _Retry(Exception):
    def __init__(self, message: str, wait: float, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.wait = wait
        self.code = code


def _raise_for_status(response: httpx.Response) -> None:
    response.read()
    error = _error_fields(response)
    detail = str(error.get("message") or "")[:500] or response.text[:500]
    message = f"Model server answered {response.status_code}: {detail}"
    if response.status_code == 429:
        raise _Retry(message, _retry_after(response), code=MODEL_RATE_LIMITED)
    if response.status_code in _RETRYABLE_STATUS:
        raise _Retry(message, _retry_after(response))
    code = _refusal_code(response.status_code, error, detail)
    if code is not None:
        raise RequestRefusedError(message, code=code)
    raise UpstreamError(message)


_CONTEXT_OVERFLOW = re.compile(
    r"context[ _-]?(?:length|size|window)|maximum model length|max_model_len", re.IGNORECASE
)
"""How model servers word a prompt longer than the context: vLLM ("This model's maximum context
length is …", "… longer than the maximum model length …"), SGLang ("… the model's context
length …"), llama.cpp ("… exceeds the available context size …"), OpenAI."""

_CONTEXT_OVERFLOW_CODES = frozenset({CONTEXT_LENGTH_EXCEEDED, "exceed_context_size_error"})
"""The ``code`` or ``type`` of such a refusal: OpenAI's, llama.cpp's."""

_NO_SUCH_MODEL = re.compile(r"\bmodel\b", re.IGNORECASE)


def _refusal_code(status: int, error: dict[str, Any], detail: str) -> str | None:
    """Why a model server refused a request, as OpenAI's code for it; None when it did not.

    A 400 or 422 is a refusal of the request as it was: a prompt longer than the model's
    context, else a request it cannot serve. A 404 that names a model is that model missing;
    any other 404 (a wrong base URL) is no refusal of this request.
    """
    codes = {value for value in (error.get("code"), error.get("type")) if isinstance(value, str)}
    if status in (400, 422):
        if codes & _CONTEXT_OVERFLOW_CODES or _CONTEXT_OVERFLOW.search(detail):
            return CONTEXT_LENGTH_EXCEEDED
        return MODEL_NOT_FOUND if MODEL_NOT_FOUND in codes else MODEL_REFUSED_PROMPT
    if status == 404 and (MODEL_NOT_FOUND in codes or _NO_SUCH_MODEL.search(detail)):
        return MODEL_NOT_FOUND
    return None


def _error_fields(response: httpx.Response) -> dict[str, Any]:
    """The error object of a model server's error body; empty when the body is none.

    OpenAI's is ``{"error": {...}}``; vLLM's and SGLang's fields may sit at the top, and some
    servers send ``{"error": "text"}``.
    """
    try:
        payload = response.json()
    except ValueError:
        return {}
    if not isinstance(payload, dict):
        return {}
    error = payload.get("error")
    if isinstance(error, dict):
        return error
    if isinstance(error, str):
        return {"message": error}
    return payload


def _retry_after(response: httpx.Response) -> float:
    try:
        return max(0.0, float(response.headers.get("retry-after", "1")))
    except ValueError:
        return 1.0


def _body(response: httpx.Response) -> Iterator[bytes]:
    """The body as it arrives: raw when the server sent it as is (no decoder layer per chunk)."""
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    if encoding == "identity" and not response.is_stream_consumed:
        return response.iter_raw()
    return response.iter_bytes()  # decoded, or read already (a transport that buffers)


def _sse_data(stream: Iterator[bytes]) -> Iterator[list[bytes]]:
    """The ``data:`` fields of a server-sent event stream, as bytes, a list per piece read.

    Split by hand rather than with ``iter_lines``: the text decoding and line layers cost more
    than the rest of a token's handling. The fields that arrived in one piece stay together
    (:func:`_parse_stream` merges their text).
    """
    pending = b""
    for chunk in stream:
        lines = (pending + chunk).split(b"\n")
        pending = lines.pop()
        fields = [line[5:].strip() for line in lines if line.startswith(b"data:")]
        if fields:
            yield fields
    if pending.startswith(b"data:"):
        yield [pending[5:].strip()]


_decode_json = json.JSONDecoder().raw_decode


def _document(data: bytes) -> dict[str, Any]:
    """One ``data:`` field's JSON object; :class:`UpstreamError` if it is not exactly one.

    The decoder's own entry point, on the field's text: ``json.loads`` would also guess the
    bytes' encoding and look for whitespace around the document, a third of a token's cost.
    """
    try:
        text = data.decode()
        payload, end = _decode_json(text)
    except ValueError as exc:  # not UTF-8, or not JSON
        raise UpstreamError(f"Model server sent malformed JSON: {_quoted(data)}") from exc
    if end != len(text):
        raise UpstreamError(f"Model server sent malformed JSON: {_quoted(data)}")
    if not isinstance(payload, dict):
        raise UpstreamError(f"Model server sent a chunk that is not an object: {_quoted(data)}")
    return payload


def _quoted(data: bytes) -> str:
    return data[:200].decode(errors="replace")


def _is_json(response: httpx.Response) -> bool:
    content_type: str = response.headers.get("content-type", "")
    return content_type.lower().startswith("application/json")


def _parse_completion(response: httpx.Response) -> Iterator[Chunk]:
    """A whole ``chat.completion`` (a server that does not stream) as the chunks of one read.

    A body labelled JSON that is an event stream after all is read as one.

    Raises:
        UpstreamError: the body is not a completion, or reports an error.
    """
    response.read()
    if not response.content.lstrip().startswith(b"{"):
        yield from _parse_stream(_sse_data(iter([response.content])))
        return
    payload = _document(response.content)
    if payload.get("error"):
        raise UpstreamError(f"Model server reported an error: {payload['error']}")
    choices = payload.get("choices")
    if not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices):
        raise UpstreamError(f"Model server sent no completion: {_quoted(response.content)}")
    for choice in choices:  # a message is a chunk's delta that came whole
        message = choice.pop("message", None)
        calls = message.get("tool_calls") if isinstance(message, dict) else None
        for number, call in enumerate(calls if isinstance(calls, list) else ()):
            if isinstance(call, dict):  # a message's calls go unnumbered, in their order
                call.setdefault("index", number)
        choice["delta"] = message
    piece = _Piece(_CallNumbers())
    piece.add(payload)
    yield from _until_given_up(piece.chunks())


_GAVE_UP = frozenset({"abort", "error"})
"""Finish reasons of an answer the server did not finish (vLLM's: the request was aborted, or
failed in the engine); ``stop``, ``length``, ``tool_calls``, ``content_filter`` and the rest
end whole answers."""


def _until_given_up(chunks: list[Chunk]) -> Iterator[Chunk]:
    """``chunks`` up to a finish that says the server gave up, then :class:`UpstreamError`."""
    for chunk in chunks:
        if type(chunk) is Finish and chunk.reason in _GAVE_UP:
            raise UpstreamError(
                f"Model server gave up on its answer (finish_reason {chunk.reason!r})"
            )
        yield chunk


def _parse_stream(pieces: Iterator[list[bytes]]) -> Iterator[Chunk]:
    """The model's chunks; consecutive text (or reasoning) that arrived together is one chunk.

    A model server sends a token per event. When several had arrived by the time the body was
    read (a fast model, a worker busy with other streams), they are handled as one delta from
    here on: one output event, one buffer append, not one pass through the loop per token. What
    arrives a token at a time still leaves a token at a time. A malformed field ends the stream
    with :class:`UpstreamError`, after the chunks before it; so do a finish that says the server
    gave up (:data:`_GAVE_UP`) and a body that ends with neither a finish nor ``[DONE]``.
    """
    calls = _CallNumbers()
    finished = False
    for fields in pieces:
        piece = _Piece(calls)
        for data in fields:
            if data == b"[DONE]":
                yield from _until_given_up(piece.chunks())
                for _ in pieces:  # read to the body's end: the connection goes back to the pool
                    pass
                return
            try:
                payload = _document(data)
            except UpstreamError:
                yield from piece.chunks()  # what came before it was fine
                raise
            if payload.get("error"):
                yield from piece.chunks()
                raise UpstreamError(f"Model server reported an error: {payload['error']}")
            piece.add(payload)
        finished = finished or piece.finished
        yield from _until_given_up(piece.chunks())
    if not finished:  # a finish reason without [DONE] is a whole answer; neither, a cut one
        raise UpstreamError("Model server ended its answer before it finished (no finish_reason)")


class _Piece:
    """The chunks of the fields read together: each run of text (or reasoning) one delta.

    A run's texts are joined when it ends, so a token costs a list append, not a chunk object.
    """

    __slots__ = ("_calls", "_chunks", "_kind", "_logprobs", "_texts", "finished")

    def __init__(self, calls: _CallNumbers) -> None:
        self._calls = calls
        self.finished = False
        """A finish reason came in this piece."""
        self._chunks: list[Chunk] = []
        self._kind: type[TextDelta | ReasoningDelta] = TextDelta
        self._texts: list[str] = []
        self._logprobs: list[dict[str, Any]] = []

    def add(self, payload: dict[str, Any]) -> None:
        """One Chat Completions chunk's deltas, finish reasons and usage, in that order."""
        for choice in payload.get("choices") or ():
            delta = choice.get("delta") or {}
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if reasoning:
                self._text(ReasoningDelta, reasoning)
            content = delta.get("content")
            # a token's piece of a character can be empty text: its log probability still counts
            logprobs = _logprobs_of(choice)
            if content or logprobs:
                self._text(TextDelta, content or "", logprobs)
            for call in delta.get("tool_calls") or ():
                function = call.get("function") or {}
                call_id = call.get("id")
                name = function.get("name")
                arguments = _arguments_text(function.get("arguments"))
                self._other(
                    ToolCallDelta(
                        index=self._calls.index_of(call.get("index"), call_id, name, arguments),
                        call_id=call_id,
                        name=name,
                        arguments=arguments,
                    )
                )
            if choice.get("finish_reason"):
                self._other(Finish(reason=choice["finish_reason"]))
                self.finished = True
        if payload.get("usage"):
            self._other(UsageReport(usage=_usage(payload["usage"])))

    def chunks(self) -> list[Chunk]:
        """The chunks so far, the open run closed."""
        self._close_run()
        return self._chunks

    def _text(
        self,
        kind: type[TextDelta | ReasoningDelta],
        text: str,
        logprobs: list[dict[str, Any]] | None = None,
    ) -> None:
        if kind is not self._kind:
            self._close_run()
            self._kind = kind
        self._texts.append(text)
        if logprobs:
            self._logprobs.extend(logprobs)

    def _other(self, chunk: Chunk) -> None:
        self._close_run()
        self._chunks.append(chunk)

    def _close_run(self) -> None:
        if self._texts:
            text = "".join(self._texts)
            if self._kind is TextDelta and self._logprobs:
                self._chunks.append(TextDelta(text=text, logprobs=tuple(self._logprobs)))
                self._logprobs = []
            else:
                self._chunks.append(self._kind(text=text))
            self._texts = []


def _logprobs_of(choice: dict[str, Any]) -> list[dict[str, Any]] | None:
    """A choice's ``logprobs.content`` entries (the text's tokens), if it has any."""
    logprobs = choice.get("logprobs")
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    return (
        [entry for entry in content if isinstance(entry, dict)]
        if isinstance(content, list)
        else None
    )


class _CallNumbers:
    """One index per tool call of a stream, whatever the model server numbers them.

    OpenAI numbers a turn's calls 0, 1, 2; a call's first fragment carries its ``id`` and name,
    the rest only its number and more arguments. Servers that number otherwise:

    - Ollama numbers every call 0 (ollama/ollama#15457, still so for models without a parser of
      their own, #15497) and before 0.4.7 sent no number at all (#7881). Read by number, a
      turn's parallel calls were one call, their arguments run together. So a fragment starts a
      new call at a number already taken when it carries another ``id`` than that call's and
      that call's arguments are already a whole JSON document. Servers that send a new ``id``
      with every fragment of one call, or open one call twice before its arguments, still make
      one call.
    - SGLang numbers a call's first fragment by the tool's place in the request's ``tools`` and
      the rest by the call's place in the answer (sgl-project/sglang#6310), so its numbers
      name no call reliably. A fragment with neither ``id`` nor name is never a call of its own
      (every call opens with its name): it goes on with the call opened last, as calls stream
      one after another (:class:`app.output.OutputBuilder` closes the open ones when a new one
      opens).
    """

    __slots__ = ("_last", "_open", "_taken")

    def __init__(self) -> None:
        self._open: dict[int, _NumberedCall] = {}  # by the server's number
        self._last: _NumberedCall | None = None
        self._taken = 0

    def index_of(self, number: Any, call_id: str | None, name: str | None, arguments: str) -> int:
        """Our index for a fragment the server numbered ``number`` (None: unnumbered).

        Raises:
            UpstreamError: the number is not an integer.
        """
        if number is None:
            number = 0
        elif type(number) is not int:
            raise UpstreamError(
                f"Model server sent a tool call index that is not an integer: {number!r}"
            )
        call = self._last
        if call is None or call_id is not None or name:
            call = self._open.get(number)
            if call is None or (call_id not in (None, call.call_id) and call.is_whole()):
                call = self._open[number] = self._last = _NumberedCall(self._taken, call_id)
                self._taken += 1
        call.arguments.append(arguments)
        return call.index


@dataclasses.dataclass(slots=True)
class _NumberedCall:
    index: int
    call_id: str | None
    arguments: list[str] = dataclasses.field(default_factory=list)

    def is_whole(self) -> bool:
        try:
            json.loads("".join(self.arguments))
        except ValueError:
            return False
        return True


def _arguments_text(arguments: Any) -> str:
    """A fragment's arguments as text: a server that sends them as a JSON object, encoded."""
    if isinstance(arguments, str):
        return arguments
    if arguments is None:
        return ""
    return json.dumps(arguments)


def _usage(raw: dict[str, Any]) -> Usage:
    prompt = int(raw.get("prompt_tokens") or 0)
    completion = int(raw.get("completion_tokens") or 0)
    cached = int((raw.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
    reasoning = int((raw.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0)
    return Usage(
        input_tokens=prompt,
        output_tokens=completion,
        total_tokens=int(raw.get("total_tokens") or prompt + completion),
        input_tokens_details=InputTokensDetails(cached_tokens=cached),
        output_tokens_details=OutputTokensDetails(reasoning_tokens=reasoning),
    )
