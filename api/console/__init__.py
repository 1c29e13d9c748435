"""The web console and the API documentation pages, served from package data.

The console is a few plain JavaScript modules and one stylesheet under `static/`, loaded by
the browser as they are: no build step, no CDN, so it works offline and `pip install` is all
it takes to ship it. Its files are public (`/` and `/console/...`); every data call it makes
carries the bearer token the operator signed in with, so the API's roles still decide.

Swagger UI and ReDoc load their scripts from the assets the `fastapi-offline` package ships
(`/docs/assets/...`) instead of a CDN, so `/docs` and `/redoc` work without a network too.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

import fastapi_offline
from fastapi import APIRouter, FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict

from api.deps import GuestDep
from api.errors import READ_ERRORS

STATIC = Path(str(files("api.console") / "static"))
DOCS_ASSETS = Path(fastapi_offline.__file__).parent / "static"
CONSOLE_PREFIX = "/console"
DOCS_ASSETS_PREFIX = "/docs/assets"

router = APIRouter(prefix="/api", tags=["session"])


class CallerPublic(BaseModel):
    """Who the bearer token is: the console shows only what this role may do."""

    model_config = ConfigDict(frozen=True)
    name: str
    role: str


@router.get("/whoami", response_model=CallerPublic, responses=READ_ERRORS)
async def whoami(caller: GuestDep) -> CallerPublic:
    """The token's name and role."""
    return CallerPublic(name=caller.name, role=caller.role.name)


def install(app: FastAPI) -> None:
    """Serve the console at `/`, its files under `/console`, and offline `/docs`, `/redoc`.

    The app must be built with `docs_url=None, redoc_url=None` (FastAPI's own pages load
    Swagger UI and ReDoc from a CDN).
    """
    openapi_url = app.openapi_url or "/openapi.json"
    pages = APIRouter(include_in_schema=False)

    @pages.get("/")
    async def console_index() -> FileResponse:
        # no-cache: a new release's index must point the browser at the new modules.
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})

    @pages.get("/docs")
    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url,
            title=f"{app.title} - Swagger UI",
            swagger_js_url=f"{DOCS_ASSETS_PREFIX}/swagger-ui-bundle.js",
            swagger_css_url=f"{DOCS_ASSETS_PREFIX}/swagger-ui.css",
            swagger_favicon_url=f"{DOCS_ASSETS_PREFIX}/favicon.png",
        )

    @pages.get("/redoc")
    async def redoc() -> HTMLResponse:
        return get_redoc_html(
            openapi_url=openapi_url,
            title=f"{app.title} - ReDoc",
            redoc_js_url=f"{DOCS_ASSETS_PREFIX}/redoc.standalone.js",
            redoc_favicon_url=f"{DOCS_ASSETS_PREFIX}/favicon.png",
            with_google_fonts=False,
        )

    app.include_router(pages)
    app.include_router(router)
    app.mount(CONSOLE_PREFIX, StaticFiles(directory=STATIC), name="console")
    app.mount(DOCS_ASSETS_PREFIX, StaticFiles(directory=DOCS_ASSETS), name="docs-assets")
