"""crcr settings, read from the environment.

With no environment at all this is the embedded default a newcomer runs:
SQLite and file storage under ``var/``, Celery tasks executed eagerly in-process,
the reference device and the bundled upstream-style test tree. Production sets
``DATABASE_URL`` (PostgreSQL), ``CELERY_BROKER_URL`` (Redis or RabbitMQ),
``SECRET_KEY_FILE``, ``ALLOWED_HOSTS`` and ``CRCR_STORAGE_ROOT``. Every variable
is listed in the README.
"""

from datetime import timedelta
from pathlib import Path
from typing import Any

from celery.schedules import crontab
from django.core.exceptions import ImproperlyConfigured

from crcr_site.lib.env import (
    env_bool,
    env_database,
    env_file_text,
    env_int,
    env_list,
    env_path,
    env_str,
    env_url,
)

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = env_path("CRCR_VAR_DIR", BASE_DIR / "var")

DEVELOPMENT_SECRET_KEY = "crcr-development-key-never-use-in-production"
# The embedded default (no DATABASE_URL) is a developer's machine, so DEBUG
# defaults on there and off for any deployment that names its database.
EMBEDDED = env_str("DATABASE_URL") is None
DEBUG = env_bool("DEBUG", default=EMBEDDED)
SECRET_KEY = env_file_text("SECRET_KEY_FILE") or DEVELOPMENT_SECRET_KEY

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])
# Absolute base of links crcr sends out (HUD callbacks, bundles).
CRCR_PUBLIC_URL = env_url("CRCR_PUBLIC_URL", "http://127.0.0.1:8000", ("http", "https"))
# The web server's (crcr_site/web.py): requests served at once, and connections held
# open at once, slow ones included (each costs a socket, not a thread).
CRCR_WEB_THREADS = env_int("CRCR_WEB_THREADS", 8, minimum=1)
CRCR_WEB_CONNECTION_LIMIT = env_int("CRCR_WEB_CONNECTION_LIMIT", 500, minimum=1)

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django_htmx",
    "template_partials",
    "axes",
    "rest_framework",
    # Only for its migrations: runs' 0013 moved its plain-text tokens to the hashed
    # runs.ApiToken, which API calls now authenticate against; its admin is hidden.
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "selection",
    "runs",
    "reproducibility",
    # The main job of `make run`: it drives every other app, and none imports it.
    "demo",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "crcr_site.lib.csp.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "crcr_site.lib.querystrings.RefuseNulMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Embedded default: work a request asks for runs after its response, not inside it.
    "crcr_site.lib.enqueue.BackgroundTasksMiddleware",
    # Last, as django-axes asks: it turns a refused sign-in into the lockout page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "crcr_site.urls"
WSGI_APPLICATION = "crcr_site.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "crcr_site.lib.access.roles",
            ],
            # Badges for states and breakable identifiers, on every app's pages.
            "libraries": {"states": "crcr_site.lib.states"},
        },
    },
]

if EMBEDDED:
    VAR_DIR.mkdir(parents=True, exist_ok=True)
DATABASES = {
    "default": env_database(
        "DATABASE_URL",
        default={
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": VAR_DIR / "crcr.sqlite3",
            # The web's requests and its in-process tasks write from two threads:
            # write-ahead logging lets readers in, and a writer waits for the lock.
            "OPTIONS": {
                "timeout": 30,
                "transaction_mode": "IMMEDIATE",
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            },
        },
        conn_max_age=env_int("DATABASE_CONN_MAX_AGE", 60, minimum=0),
    )
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# What the HUD keeps of settled commits and finished runs (`runs.hud_grid`, `runs.hud`):
# each entry is checked against the database before it is used, so a cache of its own per
# process is correct; CACHE_URL (Redis) shares one between the web's processes.
CACHE_URL = env_url("CACHE_URL", None, ("redis", "rediss"))
CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": CACHE_URL}
    if CACHE_URL
    else {
        "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
        "OPTIONS": {"MAX_ENTRIES": 5000},
    }
}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
# django-axes first: it refuses a locked-out sign-in before a password is checked.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "runs:hud"
LOGOUT_REDIRECT_URL = "login"

# Sign-in throttling (django-axes, at /accounts/login/ and /admin/login/): a username
# signing in from one address is refused for CRCR_LOGIN_LOCKOUT_MINUTES after
# CRCR_LOGIN_FAILURE_LIMIT failures in a row; other users from that address are not.
CRCR_LOGIN_FAILURE_LIMIT = env_int("CRCR_LOGIN_FAILURE_LIMIT", 5, minimum=1)
CRCR_LOGIN_LOCKOUT_MINUTES = env_int("CRCR_LOGIN_LOCKOUT_MINUTES", 15, minimum=1)
AXES_FAILURE_LIMIT = CRCR_LOGIN_FAILURE_LIMIT
AXES_COOLOFF_TIME = timedelta(minutes=CRCR_LOGIN_LOCKOUT_MINUTES)
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "crcr_site.lib.access.lockout_response"
AXES_VERBOSE = False  # no banner on every command's start-up

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = env_path("CRCR_STATIC_ROOT", VAR_DIR / "staticfiles")
# Development and tests serve static files straight from the finders.
WHITENOISE_USE_FINDERS = DEBUG

# Artifacts, bundles and reports: the file system by default, any Django storage
# backend (an S3-compatible one in production) through CRCR_STORAGE_BACKEND.
MEDIA_ROOT = env_path("CRCR_STORAGE_ROOT", VAR_DIR / "storage")
CRCR_STORAGE_BACKEND = env_str(
    "CRCR_STORAGE_BACKEND", "django.core.files.storage.FileSystemStorage"
)
# S3-compatible storage (django-storages): the bucket, and an endpoint other than AWS's
# (MinIO, Ceph, a local server); credentials come from boto3's own chain
# (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, a profile, an instance role).
STORAGE_OPTIONS: dict[str, Any] = {}
if CRCR_STORAGE_BACKEND == "storages.backends.s3.S3Storage":
    bucket = env_str("CRCR_S3_BUCKET")
    if not bucket:
        raise ImproperlyConfigured(
            "CRCR_STORAGE_BACKEND is S3Storage but CRCR_S3_BUCKET is not set"
        )
    STORAGE_OPTIONS = {
        "bucket_name": bucket,
        "endpoint_url": env_url("CRCR_S3_ENDPOINT_URL", None, ("http", "https")),
        "region_name": env_str("CRCR_S3_REGION"),
        "file_overwrite": True,  # a retried upload replaces its own earlier copy
        "querystring_auth": False,  # crcr serves files itself, never by signed URL
    }
STORAGES = {
    "default": {"BACKEND": CRCR_STORAGE_BACKEND, "OPTIONS": STORAGE_OPTIONS},
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if DEBUG
        else "whitenoise.storage.CompressedManifestStaticFilesStorage",
    },
}

if not DEBUG:
    SESSION_COOKIE_SECURE = env_bool("SECURE_COOKIES", default=True)
    CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["crcr_site.lib.access.RoleTokenAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_PAGINATION_CLASS": "crcr_site.lib.paging.ApiPagination",
    "PAGE_SIZE": 100,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "crcr API",
    "DESCRIPTION": "Machine API of crcr: dispatch intake, worker results, relay status, bundles.",
    "VERSION": "1",
    # The schema maps every endpoint: for token holders and signed-in users only (the
    # browsable docs at /api/docs/ fetch it with the session).
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated"],
    "SERVE_AUTHENTICATION": [
        "crcr_site.lib.access.RoleTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    # Swagger UI from crcr's own static files, not a CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    # Run, shard and callback all have a `status`: each enum gets its model's name.
    "ENUM_NAME_OVERRIDES": {
        "RunStatusEnum": "runs.models.Run.Status",
        "CallbackStatusEnum": "runs.models.RelayCallback.Status",
    },
}

# Celery: without a broker, tasks run eagerly in-process (the embedded default).
CELERY_BROKER_URL = env_url("CELERY_BROKER_URL", None, ("redis", "rediss", "amqp", "amqps"))
CELERY_TASK_ALWAYS_EAGER = CELERY_BROKER_URL is None
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_RESULT_BACKEND = env_url(
    "CELERY_RESULT_BACKEND", None, ("redis", "rediss", "django-db", "rpc")
)
CRCR_NIGHTLY_HOUR = env_int("CRCR_NIGHTLY_HOUR", 3, minimum=0)
if CRCR_NIGHTLY_HOUR > 23:
    raise ImproperlyConfigured(f"CRCR_NIGHTLY_HOUR={CRCR_NIGHTLY_HOUR} is not an hour (0-23)")
CELERY_BEAT_SCHEDULE = {
    "nightly-run": {
        "task": "runs.tasks.trigger_nightly",
        "schedule": crontab(hour=CRCR_NIGHTLY_HOUR, minute=0),
    },
    "requeue-orphaned-shards": {"task": "runs.tasks.requeue_orphaned_shards", "schedule": 60.0},
    "resend-lost-work": {"task": "runs.tasks.resend_lost_work", "schedule": 60.0},
    "resend-lost-bundles-and-bisections": {
        "task": "reproducibility.tasks.resend_lost_work",
        "schedule": 60.0,
    },
    "resend-lost-selection-runs": {"task": "selection.tasks.resend_lost_work", "schedule": 60.0},
    "deliver-due-callbacks": {"task": "runs.tasks.deliver_due_callbacks", "schedule": 30.0},
    "prune-bundles": {
        "task": "reproducibility.tasks.prune_bundles",
        "schedule": crontab(hour=4, minute=0),
    },
}

# The device: the Python module that registers the privateuse1 backend.
CRCR_DEVICE_MODULE: str = env_str("CRCR_DEVICE_MODULE", "crcr_reuse.reference_device")
# A PyTorch checkout (its test/ tree); unset means the bundled upstream-style tree.
CRCR_TORCH_ROOT = env_path("TORCH_ROOT", BASE_DIR / "tests" / "upstream")
# Upstream PyTorch: `git:<path to a clone>` or `github:<owner/name>`. The embedded
# default is a small local repository the demo creates.
CRCR_UPSTREAM = env_str("CRCR_UPSTREAM", f"git:{VAR_DIR / 'upstream'}")
if not CRCR_UPSTREAM.startswith(("git:", "github:")):
    raise ImproperlyConfigured(
        f"CRCR_UPSTREAM={CRCR_UPSTREAM!r} must be git:<path> or github:<owner/name>"
    )
CRCR_GITHUB_TOKEN = env_file_text("GITHUB_TOKEN_FILE")
CRCR_GITHUB_API_URL = env_url("CRCR_GITHUB_API_URL", "https://api.github.com", ("http", "https"))
# A shell command that writes the combination's wheels into $CRCR_OUTPUT_DIR;
# unset registers the installed torch and the backend module's source.
CRCR_BUILD_COMMAND = env_str("CRCR_BUILD_COMMAND")
# A build command running longer than this is killed and its run ends in error.
CRCR_BUILD_TIMEOUT = env_int("CRCR_BUILD_TIMEOUT", 4 * 3600, minimum=1)
# This host's own work folder: a run's config, test tree, test processes' reports and
# logs are written here and sent to storage, where other hosts read them. By default it
# is the file storage's own folder (one host: nothing is copied).
_work_dir = env_str("CRCR_WORK_DIR")
CRCR_WORK_DIR = Path(_work_dir).resolve() if _work_dir else None
# Each device host builds a combination's virtual environment once from its wheels
# (runs/environments.py), here, never in shared storage, and evicts the least recently
# used ones past the size cap.
CRCR_ENV_DIR = env_path("CRCR_ENV_DIR", VAR_DIR / "envs")
CRCR_ENV_CACHE_GB = env_int("CRCR_ENV_CACHE_GB", 50, minimum=1)
# A bisection with a build command builds each probed commit (cached): at most this many.
CRCR_BISECT_MAX_BUILDS = env_int("CRCR_BISECT_MAX_BUILDS", 8, minimum=1)
# What every test process needs besides torch and the backend, pinned and complete.
CRCR_TEST_REQUIREMENTS = env_path(
    "CRCR_TEST_REQUIREMENTS", BASE_DIR / "runs" / "test-requirements.txt"
)
# Where those come from; unset: uv's default (PyPI).
CRCR_PACKAGE_INDEX = env_url("CRCR_PACKAGE_INDEX", None, ("http", "https", "file"))
CRCR_MAX_SHARD_SECONDS = env_int("CRCR_MAX_SHARD_SECONDS", 1800, minimum=1)
# Whole-shard and single-test limits; a test silent for CRCR_TEST_TIMEOUT is a hang.
CRCR_SHARD_TIMEOUT = env_int("CRCR_SHARD_TIMEOUT", 2 * CRCR_MAX_SHARD_SECONDS, minimum=1)
CRCR_TEST_TIMEOUT = env_int("CRCR_TEST_TIMEOUT", 300, minimum=1)
# A test process that writes nothing (output or progress) for this long while no test runs
# (importing, collecting, loading the device, between tests) is killed and its shard retried
# as infrastructure. A running test's silence is CRCR_TEST_TIMEOUT's alone: no overlap.
CRCR_QUIET_TIMEOUT = env_int("CRCR_QUIET_TIMEOUT", 300, minimum=1)
# A backend with a health probe has its device probed every this many tests (besides
# before the first and after each failure); 0: only then.
CRCR_HEALTH_PROBE_EVERY = env_int("CRCR_HEALTH_PROBE_EVERY", 20, minimum=0)
# An unacknowledged task returns to the queue after this long (Redis): longer
# than any shard, so a slow shard is never handed out twice while it runs.
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": CRCR_SHARD_TIMEOUT + 3600}
# A running shard refreshes its heartbeat this often; one silent for three beats is
# orphaned (its worker died) and is given to another worker.
CRCR_HEARTBEAT_SECONDS = env_int("CRCR_HEARTBEAT_SECONDS", 10, minimum=1)
CRCR_SHARD_RETRIES = env_int("CRCR_SHARD_RETRIES", 3, minimum=0)
# Planning, a bundle, a selection run or a bisection whose worker died is taken over
# (its heartbeat silent for three beats) at most this many times in all.
CRCR_CLAIM_ATTEMPTS = env_int("CRCR_CLAIM_ATTEMPTS", 3, minimum=1)
# A dispatch still ungated (or a run still unplanned) this long after it was stored
# lost its message: beat's `resend_lost_work` sends it again.
CRCR_LOST_WORK_SECONDS = env_int("CRCR_LOST_WORK_SECONDS", 120, minimum=1)
# PyTorch's disabled tests (disabled-tests-condensed.json format); unset: none.
CRCR_DISABLED_TESTS_FILE = env_str("CRCR_DISABLED_TESTS_FILE")
# A test that passed only on a retry in this many of the backend's last
# CRCR_QUARANTINE_WINDOW runs becomes a quarantine proposal (selection/promotion.py).
CRCR_QUARANTINE_FLAKY_RUNS = env_int("CRCR_QUARANTINE_FLAKY_RUNS", 2, minimum=1)
CRCR_QUARANTINE_WINDOW = env_int("CRCR_QUARANTINE_WINDOW", 10, minimum=1)
# A selection run's operator capture and stage 4 run as tasks on the `device` queue, a
# chunk each: a file, or this many test variants of a bigger one (selection/chunks.py).
CRCR_SELECTION_CHUNK = env_int("CRCR_SELECTION_CHUNK", 500, minimum=1)
CRCR_DISPATCH_MAX_BYTES = env_int("CRCR_DISPATCH_MAX_BYTES", 256 * 1024, minimum=1024)
# A config file larger than this, submitted on a page (onboarding), is checked on a worker
# while its page shows the steps: validation costs ~0.6 s a megabyte (selection/submissions.py).
CRCR_CONFIG_BACKGROUND_BYTES = env_int("CRCR_CONFIG_BACKGROUND_BYTES", 1024 * 1024, minimum=0)
# A HUD callback still undelivered this long after it was written is given up (rejected,
# with the reason): the relay keeps a dispatch's state for 3 days (CRCR_STATUS_TTL) and
# refuses callbacks it no longer knows, so retrying longer only adds noise; a relay down
# for hours, even a day or two, loses nothing.
CRCR_RELAY_GIVE_UP_HOURS = env_int("CRCR_RELAY_GIVE_UP_HOURS", 72, minimum=1)
# Secrets by reference: a backend's `relay_token: file:<path>` is read only inside this
# folder (symlinks and `..` resolved first); relay tokens go here, nothing else.
CRCR_SECRETS_DIR = env_path("CRCR_SECRETS_DIR", VAR_DIR / "secrets")
# Where crcr's relay worker may send callbacks: hosts (`relay.example.org`) or URL prefixes
# (`https://relay.example.org/github/`). https only, unless DEBUG is on at start-up: then
# also a local relay (the simulator's http://127.0.0.1:<port>), listed or not.
CRCR_RELAY_URL_ALLOWLIST = env_list("CRCR_RELAY_URL_ALLOWLIST", [])
CRCR_RELAY_LOCAL_HTTP = DEBUG
# Every sender of a repository's HUD callbacks (the relay worker, GitHub Actions reporters and
# bridges) shares one budget of this many sends per CRCR_RELAY_RATE_WINDOW_SECONDS, under the
# relay's RATE_LIMIT_PER_MIN of 100 a minute (runs/relay/pacing.py): a callback past it waits
# for its turn. The window is settable so that a test can scale a minute down.
CRCR_RELAY_CALLBACKS_PER_MINUTE = env_int("CRCR_RELAY_CALLBACKS_PER_MINUTE", 90, minimum=1)
CRCR_RELAY_RATE_WINDOW_SECONDS = env_int("CRCR_RELAY_RATE_WINDOW_SECONDS", 60, minimum=1)
# A reporter's claim on due callbacks (runs/relay/claims.py) lasts this long; one that
# died is noticed when it runs out and the next reporter resends.
CRCR_RELAY_LEASE_SECONDS = env_int("CRCR_RELAY_LEASE_SECONDS", 300, minimum=10)
# A HUD job whose in_progress landed this long ago and whose completed is not written yet is
# reported `timed_out` by crcr: the relay's sweeper does so at 6 hours (ZOMBIE_TIMEOUT_SECONDS)
# and then refuses the job's completed; the hour left covers a lost answer's retries.
CRCR_RELAY_IN_PROGRESS_DEADLINE_MINUTES = env_int(
    "CRCR_RELAY_IN_PROGRESS_DEADLINE_MINUTES", 300, minimum=1
)
if CRCR_RELAY_IN_PROGRESS_DEADLINE_MINUTES >= 360:
    raise ImproperlyConfigured(
        f"CRCR_RELAY_IN_PROGRESS_DEADLINE_MINUTES={CRCR_RELAY_IN_PROGRESS_DEADLINE_MINUTES} "
        "is not under the relay's 6-hour sweeper (360 minutes), which would time the job out first"
    )
# Config PRs: the author may not approve their own change, nor may whoever approved one
# of its proposals approve or merge it (off: a one-person team).
CRCR_FORBID_SELF_APPROVAL = env_bool("CRCR_FORBID_SELF_APPROVAL", True)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
}

# Checked last, so that a malformed variable above is reported by name first.
_key_file = env_str("SECRET_KEY_FILE")
if BASE_DIR.is_relative_to(CRCR_SECRETS_DIR) or (
    _key_file and Path(_key_file).resolve().is_relative_to(CRCR_SECRETS_DIR)
):
    raise ImproperlyConfigured(
        f"CRCR_SECRETS_DIR={CRCR_SECRETS_DIR} holds SECRET_KEY_FILE or crcr itself: a "
        "backend's relay token could name them; give relay tokens a folder of their own"
    )
if not DEBUG and SECRET_KEY == DEVELOPMENT_SECRET_KEY:
    raise ImproperlyConfigured(
        "DEBUG is off but SECRET_KEY_FILE is not set, so the development secret key "
        "would sign sessions: set SECRET_KEY_FILE to a file holding a secret key "
        "(or DEBUG=true on a development machine)"
    )
