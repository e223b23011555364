"""One renderer for every error: OpenAI's ``{"error": {message, type, param, code}}``."""

from __future__ import annotations

import logging

import redis
from flask import Flask, Response, jsonify
from werkzeug.exceptions import HTTPException

from app.errors import AppError, ServerError
from app.refusals import store_error

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


def _render_store_error(exc: redis.RedisError) -> Response:
    """A store away or refusing writes for now: a 503 to retry, logged in one line.

    Redis away past the outage a command rides out, no pooled connection in time, or Redis
    refusing writes (:mod:`app.refusals`). Not a 500: nothing is wrong with the request or the
    fleet's code, and the SDKs retry a 503. One line, without a traceback, as a burst may answer
    thousands of them. Any other error Redis answered is ours: a 500, its traceback logged.
    """
    error = store_error(exc)
    return render(error) if error is not None else _render_unexpected(exc)


def register(app: Flask) -> None:
    """Install the handlers: ours, the store's, werkzeug's HTTP errors, and a last resort."""
    app.register_error_handler(AppError, render)
    for store_errors in (redis.ConnectionError, redis.TimeoutError, redis.ResponseError):
        app.register_error_handler(store_errors, _render_store_error)
    app.register_error_handler(HTTPException, _render_http)
    app.register_error_handler(Exception, _render_unexpected)
