"""The web app a tenant's users work in, served by the API process under ``/app`` (``pages.py``)."""
