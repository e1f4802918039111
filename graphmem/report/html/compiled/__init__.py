"""The report's templates compiled by graphmem/report/html/template_modules.py:
generated, do not edit. page.py uses the modules only while this jinja2 version and these
sources' digest hold."""

JINJA2_VERSION = "3.1.6"
SOURCES_SHA256 = "39fc0f29ce3331d72fc58518fad1b85cfcdd8d7506c8bb1afafbbdb9036794f8"
