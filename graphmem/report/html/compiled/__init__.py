"""The report's templates compiled by graphmem/report/html/template_modules.py:
generated, do not edit. page.py uses the modules only while this jinja2 version and these
sources' digest hold."""

JINJA2_VERSION = "3.1.6"
SOURCES_SHA256 = "f56c9da99d332f8416fa78d0d994b934304657049e830fb7c79460ac4c5e7b78"
