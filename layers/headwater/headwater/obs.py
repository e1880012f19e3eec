"""Structured JSON logs on Lambda (docs/operations.md).

Every function logs through one Powertools handler, and the core's loggers
(`logging.getLogger("headwater.…")`) write through that same handler, so their lines carry
the keys of the function's own lines: service, function_request_id, correlation_id,
cold_start, and `name` (the logger's name). Only the function entry points import this
module (functions/*/handler.py; functions/stream/logging.json for the uvicorn process); the
core never does, so `make run` and the in-process tiers keep their own logging setup.
"""

from __future__ import annotations

import logging
import os
import sys

from aws_lambda_powertools import Logger
from aws_lambda_powertools.logging.formatter import LambdaPowertoolsFormatter
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers
from aws_lambda_powertools.shared.constants import SERVICE_NAME_ENV

from headwater.settings import ENV_LAMBDA_FUNCTION_NAME

CORE_LOGGER = "headwater"
# The record's logger name, as the `name` key of every line. Given to the formatter at
# construction, so it survives `inject_lambda_context(clear_state=True)` (which drops
# appended keys).
LOGGER_NAME = "%(name)s"


def function_logger() -> Logger:
    """The function's Powertools Logger (service and level from POWERTOOLS_SERVICE_NAME and
    POWERTOOLS_LOG_LEVEL / AWS_LAMBDA_LOG_LEVEL), with the core's loggers writing through its
    handler at its level. They hang below "headwater", so modules imported later (surfaces
    load on first use) propagate to it and are covered as well."""
    logger = Logger(name=LOGGER_NAME)
    logging.getLogger(CORE_LOGGER)  # registered even if no core module has logged yet
    copy_config_to_registered_loggers(source_logger=logger, include={CORE_LOGGER})
    return logger


def stream_log_handler() -> logging.Handler:
    """The JSON handler of StreamFunction's uvicorn process (functions/stream/logging.json,
    named by UVICORN_LOG_CONFIG in template.yaml). No Lambda handler runs there (the Lambda
    Web Adapter proxies each invocation to uvicorn), so its lines have the same shape as
    function_logger()'s without the invocation's keys."""
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(
        LambdaPowertoolsFormatter(
            service=os.environ.get(SERVICE_NAME_ENV, "service_undefined"),
            function_name=os.environ.get(ENV_LAMBDA_FUNCTION_NAME),
            name=LOGGER_NAME,
        )
    )
    return handler
