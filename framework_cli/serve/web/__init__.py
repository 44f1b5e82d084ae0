"""The web page of `fw web`: a Starlette app over the home (`create_app`), its Jinja2
templates and one stylesheet, and the minimal code that serves it on uvicorn (`server`)."""

from .app import create_app

__all__ = ["create_app"]
