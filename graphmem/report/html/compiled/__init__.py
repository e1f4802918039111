"""The report's templates compiled by graphmem/report/html/template_modules.py:
generated, do not edit. page.py uses the modules only while this jinja2 version and these
sources' digest hold."""

JINJA2_VERSION = "3.1.6"
SOURCES_SHA256 = "f1db819c3113d8751a5c59baf3c67104a68e96417874ae3631593f6e8d6fced9"
