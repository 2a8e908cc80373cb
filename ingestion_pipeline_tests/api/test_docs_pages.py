"""The API's documentation pages work without internet: every script, style and icon they load is served by
the API itself (FastAPI's defaults load them from a CDN, and /docs was blank offline)."""

from __future__ import annotations

import re

import pytest


@pytest.mark.parametrize("page,script", [("/docs", "swagger-ui-bundle.js"), ("/redoc", "redoc.standalone.js")])
def test_a_docs_page_loads_only_what_the_api_serves(api, page, script):
    html = api.client.get(page)
    assert html.status_code == 200 and html.headers["content-type"].startswith("text/html")
    loaded = re.findall(r'(?:src|href)="([^"]+)"', html.text) + re.findall(r"url: '([^']+)'", html.text)
    assert any(url.endswith(script) for url in loaded), loaded
    assert not [url for url in loaded if "//" in url], f"{page} loads from another host: {loaded}"
    for url in loaded:
        served = api.client.get(url)
        assert served.status_code == 200 and len(served.content) > 0, url
    assert "/openapi.json" in html.text


def test_swagger_ui_is_one_that_renders_openapi_3_1(api):
    assert api.client.get("/openapi.json").json()["openapi"].startswith("3.1")
    bundle = api.client.get("/docs-static/swagger-ui-bundle.js").text
    # Swagger UI 4 answers an OpenAPI 3.1 document with "Unable to render this definition"; 5 renders it
    assert re.search(r'"5\.\d+\.\d+"', bundle)


def test_the_docs_pages_are_not_in_the_schema(api):
    paths = api.client.get("/openapi.json").json()["paths"]
    assert not [p for p in paths if p.startswith(("/docs", "/redoc"))]
