"""The error tree of the fleet.

Every error a client can cause or see is an ``AppError``; the gateway renders each as OpenAI's
``{"error": {"message", "type", "param", "code"}}`` with the error's ``status``::

    AppError
    ├── InvalidRequestError        400  the client's request is wrong
    │   ├── PreviousResponseNotFoundError   previous_response_id names nothing usable
    │   └── UnsupportedMediaTypeError / PayloadTooLargeError   415 / 413
    ├── AuthenticationError        401  missing or wrong bearer key
    ├── NotFoundError              404  unknown response id or route, or another tenant's object
    ├── RateLimitError             429  a tenant's limit (``rate_limit_exceeded``, with headers)
    ├── MethodNotAllowedError      405
    ├── UpstreamError              model server or MCP transport failed (retryable)
    ├── ModelBehaviorError         the model answered something unusable (→ response failed)
    ├── ServerError                500  our own fault; never for client mistakes
    └── ServiceUnavailableError    503  the store cannot be reached or is busy (retryable)

Exceptions carry only strings and ints so they pickle across Celery (STYLE.md rule 23).
"""

from __future__ import annotations

from typing import Any


class AppError(Exception):
    """Root of every error the fleet raises on purpose."""

    status: int = 500
    type: str = "server_error"
    default_code: str | None = None

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code if code is not None else self.default_code
        self.headers: dict[str, str] = {}
        """Response headers the gateway sends with the error (a 429's ``Retry-After`` …)."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.message, self.param, self.code))

    def to_dict(self) -> dict[str, Any]:
        """The OpenAI error body."""
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }


def _rebuild(cls: type[AppError], message: str, param: str | None, code: str | None) -> AppError:
    return cls(message, param=param, code=code)


class InvalidRequestError(AppError):
    """The request is malformed or asks for something impossible (400)."""

    status = 400
    type = "invalid_request_error"


class PreviousResponseNotFoundError(InvalidRequestError):
    """``previous_response_id`` names no stored response (400, OpenAI's code)."""

    default_code = "previous_response_not_found"


class UnsupportedMediaTypeError(InvalidRequestError):
    """The body is not ``application/json`` (415)."""

    status = 415
    default_code = "unsupported_media_type"


class PayloadTooLargeError(InvalidRequestError):
    """The body is larger than the configured limit (413)."""

    status = 413
    default_code = "payload_too_large"


class AuthenticationError(AppError):
    """Missing or wrong bearer key (401)."""

    status = 401
    type = "authentication_error"
    default_code = "invalid_api_key"


class NotFoundError(AppError):
    """Unknown response id or route (404)."""

    status = 404
    type = "not_found"
    default_code = "not_found"


class RateLimitError(AppError):
    """A tenant reached one of its limits (429, OpenAI's shape: ``type`` names the limit)."""

    status = 429
    type = "requests"
    default_code = "rate_limit_exceeded"


class MethodNotAllowedError(AppError):
    """The route exists but not for this method (405)."""

    status = 405
    type = "invalid_request_error"
    default_code = "method_not_allowed"


class UpstreamError(AppError):
    """The model server (or another upstream) could not answer; retryable."""

    status = 502
    type = "model_error"
    default_code = "upstream_error"


MODEL_RATE_LIMITED = "rate_limit_exceeded"
"""The code of a model server's error when it still answered 429 after every retry."""

CONTEXT_LENGTH_EXCEEDED = "context_length_exceeded"
"""The code of a model server's refusal of a prompt longer than its context window."""

MODEL_NOT_FOUND = "model_not_found"
"""The code of a model server's answer that it has no model of the request's name."""

MODEL_REFUSED_PROMPT = "invalid_prompt"
"""The code of any other refusal of a request as it was (400, 422): no retry can help."""

RESPONSE_ERROR_CODES = frozenset(
    {MODEL_RATE_LIMITED, CONTEXT_LENGTH_EXCEEDED, MODEL_NOT_FOUND, MODEL_REFUSED_PROMPT}
)
"""The codes of :class:`UpstreamError` a failed response carries as they are; every other
fails it with ``server_error``, which clients retry. They are the codes OpenAI's own server
fails a response with, and Codex CLI acts on each: after ``rate_limit_exceeded`` it waits as
long as the message's "try again in N s" says (a model server's own message often does);
after ``context_length_exceeded`` it tells its user the context window is full; after
``model_not_found`` and ``invalid_prompt`` it shows the message. It retries none of those,
where it retries a ``server_error`` five times. ``context_length_exceeded`` and
``model_not_found`` are not among the codes OpenAI's SDK declares for a response's error (it
reads them all the same: it does not validate what it receives)."""


def failure_type(code: str) -> str:
    """The ``type`` of a failed response's ``error`` (and of its ``error`` event) for ``code``.

    The type the failure would have as an HTTP error: the model server refused the prompt as it
    was (``invalid_request_error``, as a 400 says), still refused for its rate after every retry
    (``requests``, as the gateway's own 429s say); every other failure is the fleet's or its
    model server's (``server_error``). Clients act on the code; the type tells a person reading
    a failed response whose side to look at.
    """
    if code == MODEL_RATE_LIMITED:
        return RateLimitError.type
    if code in RESPONSE_ERROR_CODES:
        return InvalidRequestError.type
    return ServerError.type


class ModelBehaviorError(AppError):
    """The model answered something the fleet cannot use; the response fails."""

    status = 500
    type = "model_error"
    default_code = "model_behavior_error"


class ServerError(AppError):
    """A fault of the fleet itself."""

    status = 500
    type = "server_error"
    default_code = "server_error"


class ServiceUnavailableError(AppError):
    """The fleet cannot serve the request now (503); retryable, with ``Retry-After``.

    Its Redis is away longer than a command waits, or no pooled connection freed up in time.
    """

    status = 503
    type = "server_error"
    default_code = "service_unavailable"


def retry_later(message: str) -> ServiceUnavailableError:
    """A 503 whose ``Retry-After: 1`` tells the client (and the SDKs' retry) to ask again."""
    error = ServiceUnavailableError(message)
    error.headers["Retry-After"] = "1"
    return error


def quoted(value: object, *, limit: int = 64) -> str:
    """``value`` as an error message may echo it: quoted, and cut short past ``limit`` chars.

    A client's own value comes back in the message that refuses it, but never whole: an 8 MB id
    would otherwise make an 8 MB error.
    """
    text = str(value)
    if len(text) > limit:
        text = f"{text[:limit]}…"
    return f"'{text}'"
