"""One renderer for every error: OpenAI's ``{"error": {message, type, param, code}}``."""

from __future__ import annotations

import logging

import redis
from flask import Flask, Response, jsonify
from werkzeug.exceptions import HTTPException

from app.errors import AppError, ServerError, retry_later
from app.refusals import refusal_of, store_message

logger = logging.getLogger(__name__)

_HTTP_TYPES = {
    400: ("invalid_request_error", "invalid_request"),
    401: ("authentication_error", "invalid_api_key"),
    404: ("not_found", "not_found"),
    405: ("invalid_request_error", "method_not_allowed"),
    408: ("invalid_request_error", "request_timeout"),
    413: ("invalid_request_error", "payload_too_large"),
    415: ("invalid_request_error", "unsupported_media_type"),
    431: ("invalid_request_error", "request_header_fields_too_large"),
}


def render(error: AppError) -> Response:
    """The JSON response of an ``AppError``."""
    response = jsonify(error.to_dict())
    response.status_code = error.status
    response.headers.update(error.headers)
    return response


def _render_http(exc: HTTPException) -> Response:
    """An HTTP error of werkzeug's as OpenAI's, without its traceback.

    The router's 404 and 405 carry the matcher's own error and the stack it came through, and
    the request keeps them: the error, its frames and the request's stack (context, body) sat in
    a reference cycle until the gateway's rare full collection, for every unknown route. Nothing
    reads the traceback of an error answered here.
    """
    exc.__traceback__ = exc.__context__ = None
    status = exc.code or 500
    error_type, code = _HTTP_TYPES.get(status, ("server_error", "server_error"))
    message = {
        404: "Unknown route.",
        405: "Method not allowed for this route.",
        413: "The request body is too large.",
    }.get(status, exc.description or exc.name)
    response = jsonify(
        {"error": {"message": message, "type": error_type, "param": None, "code": code}}
    )
    response.status_code = status
    for name, value in exc.get_headers():  # e.g. 405's ``Allow``; not its HTML content type
        if name.lower() != "content-type":
            response.headers[name] = value
    return response


def _render_unexpected(exc: Exception) -> Response:
    logger.exception("unhandled error", exc_info=exc)
    return render(ServerError("The server had an error while processing your request."))


def _render_unavailable(exc: redis.ConnectionError | redis.TimeoutError) -> Response:
    """Redis away longer than the outage a command rides out, or no pooled connection in time.

    A 503 the client may retry (the SDKs do), not a 500: nothing is wrong with the request or
    the fleet's code. Logged without a traceback, as a burst may answer thousands of them, but
    with the error's message (redis-py's ``repr`` of an error is its kind alone).
    """
    logger.warning("answered 503, the store is unavailable: %s: %s", type(exc).__name__, exc)
    return render(retry_later("The server cannot reach its store right now; please retry."))


def _render_refused(exc: redis.ResponseError) -> Response:
    """Redis refused a write for now: a 503 to retry, logged as :func:`_render_unavailable` is.

    Out of memory, unable to save to its disk, too few replicas (:mod:`app.refusals`). Any
    other error Redis answered is ours: a 500, its traceback logged.
    """
    why = refusal_of(exc)
    if why is None:
        return _render_unexpected(exc)
    logger.warning("answered 503, the store %s: %s: %s", why, type(exc).__name__, exc)
    return render(retry_later(store_message(why)))


def register(app: Flask) -> None:
    """Install the handlers: ours, the store's, werkzeug's HTTP errors, and a last resort."""
    app.register_error_handler(AppError, render)
    app.register_error_handler(redis.ConnectionError, _render_unavailable)
    app.register_error_handler(redis.TimeoutError, _render_unavailable)
    app.register_error_handler(redis.ResponseError, _render_refused)
    app.register_error_handler(HTTPException, _render_http)
    app.register_error_handler(Exception, _render_unexpected)
