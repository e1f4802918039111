"""The report's templates compiled by graphmem/report/html/template_modules.py:
generated, do not edit. page.py uses the modules only while this jinja2 version and these
sources' digest hold."""

JINJA2_VERSION = "3.1.6"
SOURCES_SHA256 = "bec7cb0125901f408195821573b649373e431b1bea5c0f8b0ca5326c9669e1be"
