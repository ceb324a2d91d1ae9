"""The admin-only page that onboards a backend: its profile and its first config file
(crcr's YAML or a Torch Spyre config), checked and saved together by `onboarding`."""

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse

from crcr_site.lib.access import ADMIN, role_of
from selection import onboarding
from selection.forms import OnboardingForm


@login_required
def backend_create(request: HttpRequest) -> HttpResponse:
    if role_of(request.user) != ADMIN:
        raise PermissionDenied("Only an admin may add a backend.")
    # PyTorch's relay takes only GitHub Actions' tokens: the sender most teams need.
    form = OnboardingForm(
        request.POST or None, request.FILES or None, initial={"relay_sender": "actions"}
    )
    context = {"form": form, "nav": "onboard"}
    if request.method == "POST" and not form.is_valid() and form.cleaned_data.get("config"):
        _check_config(form)  # every problem at once: the config's too, not only the fields'
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        upload = data["config"]
        try:
            done = onboarding.add_backend(
                form.profile(), upload.read().decode("utf-8"), upload.name,
                data["config_format"], request.user,
            )  # fmt: skip
        except UnicodeDecodeError:
            form.add_error("config", "the config file is not UTF-8 text")
        except onboarding.OnboardingError as error:
            _show(form, error)
        else:
            context |= {
                "done": done,
                "report": done.report.text() if done.report else "",
                "config_url": reverse("selection:backendconfig_detail", args=[done.backend.slug]),
            }
            return render(request, "selection/backend_created.html", context, status=201)
    return render(
        request, "selection/backend_form.html", context, status=400 if form.errors else 200
    )


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
    """Each problem next to its field (the others above the form)."""
    for name, texts in error.problems.items():
        for text in texts:
            form.add_error(name if name in form.fields else None, text)
