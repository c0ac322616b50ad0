"""The reward service (`cosmos-train reward-serve`): `app.create_app` and `app.run`.

FastAPI and uvicorn come with `pip install 'cosmos-train[serve]'`; this package imports them only in
`cosmos_train.service.app`, so `import cosmos_train` works without them.
"""

SERVE_EXTRA_HINT = "pip install 'cosmos-train[serve]'"
SERVE_MODULES = ("fastapi", "starlette", "uvicorn", "multipart", "python_multipart")
