"""The admin-only page that onboards a backend: its profile and its first config file
(crcr's YAML or a Torch Spyre config), checked and saved together by `onboarding`; a
large file is checked on a worker (`submissions`) while its own page shows the steps."""

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse

from crcr_site.lib.access import ADMIN, role_of
from selection import onboarding, submissions
from selection.forms import OnboardingForm
from selection.models import ConfigSubmission, ConfigVersion


def admin_only(request: HttpRequest) -> None:
    if role_of(request.user) != ADMIN:
        raise PermissionDenied("Only an admin may add a backend.")


@login_required
def backend_create(request: HttpRequest) -> HttpResponse:
    admin_only(request)
    # PyTorch's relay takes only GitHub Actions' tokens: the sender most teams need.
    form = OnboardingForm(
        request.POST or None, request.FILES or None, initial={"relay_sender": "actions"}
    )
    context = {"form": form, "nav": "onboard"}
    valid = request.method == "POST" and form.is_valid()
    upload = form.cleaned_data.get("config") if request.method == "POST" else None
    large = upload is not None and submissions.is_large(upload.size)
    if upload and not valid and not large:
        _check_config(form)  # every problem at once: the config's too, not only the fields'
    if upload and valid:
        try:
            text = upload.read().decode("utf-8")
        except UnicodeDecodeError:
            form.add_error("config", "the config file is not UTF-8 text")
        else:
            if large:
                return _check_later(request, form, text)
            return _add_now(request, form, text, context)
    return render(
        request, "selection/backend_form.html", context, status=400 if form.errors else 200
    )


def _add_now(request: HttpRequest, form: OnboardingForm, text: str, context: dict) -> HttpResponse:
    data = form.cleaned_data
    try:
        done = onboarding.add_backend(
            form.profile(), text, data["config"].name, data["config_format"], request.user
        )
    except onboarding.OnboardingError as error:
        _show(form, error)
        return render(request, "selection/backend_form.html", context, status=400)
    return _created(request, done.config, done.report.text() if done.report else "", 201)


def _check_later(request: HttpRequest, form: OnboardingForm, text: str) -> HttpResponse:
    data = form.cleaned_data
    submission = submissions.start(
        ConfigSubmission.Kind.ONBOARD, form.profile(), request.user,
        text=text, name=data["config"].name[:255], config_format=data["config_format"],
    )  # fmt: skip
    return redirect("selection:configsubmission_detail", uuid=submission.uuid)


def outcome(request: HttpRequest, submission: ConfigSubmission) -> HttpResponse:
    """An ended check's page: the new backend, or the form as sent with its problems."""
    if submission.result is not None:
        return _created(request, submission.result, submission.report, 200)
    form = OnboardingForm.as_submitted(submission.form_data, submission.config_format)
    _show(form, onboarding.OnboardingError(submission.problems))
    context = {"form": form, "nav": "onboard", "submission": submission}
    return render(request, "selection/backend_form.html", context)


def _created(request: HttpRequest, config: ConfigVersion, report: str, status: int) -> HttpResponse:
    context = {
        "backend": config.backend,
        "config": config,
        "report": report,
        "config_url": reverse("selection:backendconfig_detail", args=[config.backend.slug]),
        "nav": "onboard",
    }
    return render(request, "selection/backend_created.html", context, status=status)


def _check_config(form: OnboardingForm) -> None:
    upload = form.cleaned_data["config"]
    try:
        text = upload.read().decode("utf-8")
        onboarding.read_config(text, upload.name, form.cleaned_data.get("config_format", "crcr"))
    except UnicodeDecodeError:
        form.add_error("config", "the config file is not UTF-8 text")
    except onboarding.OnboardingError as error:
        _show(form, error)


def _show(form: OnboardingForm, error: onboarding.OnboardingError) -> None:
    """Each problem next to its field (the others above the form), each once."""
    for name, texts in error.problems.items():
        field = name if name in form.fields else None
        for text in texts:
            if text not in form.errors.get(field or "__all__", []):
                form.add_error(field, text)
