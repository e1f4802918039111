"""The report's templates compiled by graphmem/report/html/template_modules.py:
generated, do not edit. page.py uses the modules only while this jinja2 version and these
sources' digest hold."""

JINJA2_VERSION = "3.1.6"
SOURCES_SHA256 = "cca6180da6a66ea3a207f50ab6c0a5cfee89187b82a78b82bfe9c15d796966b7"
