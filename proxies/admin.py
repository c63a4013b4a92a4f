"""Admin for proxy judges: start a proxy run or a training (checked by the same services as
the command line and the API), follow and resume runs, read learned proxies' reports."""

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.utils.html import format_html
from django.utils.translation import ngettext

from evalstudy import permissions as perms
from evalstudy.admin.row_fields import settings_field
from evalstudy.admin.scoping import ONLY_VISIBLE, StudyScopedAdmin, rows_with_role
from evalstudy.audit import ADMIN
from kit.param_fields import param_formfield
from kit.params import Param, params_given

from .methods import LEARNED_KINDS, all_methods, method_of
from .models import JudgePromptVersion, LearnedProxy, ProxyRun

PARAM_PREFIX = "param_"


def _method_params() -> dict[str, tuple[Param, list[str]]]:
    """Every run parameter any method takes, once by name, with the methods taking it."""
    found: dict[str, tuple[Param, list[str]]] = {}
    for method in all_methods():
        for param in method.params:
            found.setdefault(param.name, (param, []))[1].append(method.name)
    return found


def _param_fields() -> dict[str, forms.Field]:
    """An input per run parameter (from the methods' specs), its help naming its methods."""
    return {PARAM_PREFIX + name: param_formfield(
                param, help_text=f"{param.help} Taken by: {', '.join(methods)}.".strip())
            for name, (param, methods) in _method_params().items()}


def _only_editable_studies(form, user) -> None:
    """Starting a run or a training needs the editor role on the study (viewers only read)."""
    form.base_fields["study"].queryset = perms.studies_with_role(user, perms.EDITOR)


class ProxyRunStartFormBase(forms.ModelForm):
    """Starting a proxy run from the admin: the request is checked by the same service as the
    command line and the API, and its errors are shown on the form."""

    criteria_keys = forms.CharField(
        label="Criteria", required=False,
        help_text="Criterion keys separated by spaces (blank: every criterion the method "
                  "answers).")
    backend_config = settings_field(
        label="Backend", names=("backend (openai or hf)", "base_url", "model", "api_key_env",
                                "model_path", "timeout_s", "concurrency", "soft_prompt"),
        help_text="Blank: the EVALSTUDY_JUDGE_* settings. One setting a row, e.g. base_url: "
                  "http://gpu-host:8000/v1, model: llama-3-8b, api_key_env: VLLM_KEY; or "
                  "backend: hf, model_path: /models/flan-t5-xl. Never paste a key here.")

    class Meta:
        model = ProxyRun
        fields = ("study", "method", "template", "learned_proxy")

    def run_params(self, method_name: str) -> dict:
        """The parameters set for the chosen method; one set that only other methods take is
        an error on its input."""
        method = method_of(method_name)
        for name, (_, methods) in _method_params().items():
            value = self.cleaned_data.get(PARAM_PREFIX + name)
            if name not in method.param_names and value not in (None, "", [], False):
                self.add_error(PARAM_PREFIX + name, f"{method_name} does not take {name} (it is "
                                                    f"for {', '.join(methods)}): leave it blank.")
        return params_given(method.params, {p.name: self.cleaned_data.get(PARAM_PREFIX + p.name)
                                            for p in method.params})

    def clean(self):
        data = super().clean()
        if self.errors:
            return data
        from .runs import proxy_run_prepare

        params = self.run_params(data["method"])
        if self.errors:
            return data
        try:
            self.prepared = proxy_run_prepare(
                study=data["study"], method=data["method"],
                criteria=data.get("criteria_keys", "").split() or None,
                backend=data.get("backend_config") or None, template=data.get("template", ""),
                params=params, learned_proxy=data.get("learned_proxy"))
        except ValidationError as error:
            raise forms.ValidationError(error.messages) from None
        return data


@admin.register(ProxyRun)
class ProxyRunAdmin(StudyScopedAdmin):
    list_display = ("pk", "study", "method", "rater", "status", "progress", "failed",
                    "created_at", "finished_at")
    list_filter = ("status", "method", ("study", ONLY_VISIBLE))
    readonly_fields = ("study", "rater", "method", "criteria", "backend", "template", "params",
                       "learned_proxy", "prompt_version", "signature", "queue", "status",
                       "total", "done", "failed", "usage", "error", "created_by", "created_at",
                       "started_at", "heartbeat_at", "finished_at")
    actions = ["resume_runs"]

    @admin.display(description="progress")
    def progress(self, run):
        return format_html('<progress max="{}" value="{}"></progress> {} / {}', run.total,
                           run.done, run.done, run.total)

    def get_form(self, request, obj=None, **kwargs):
        if obj is None:
            kwargs["form"] = ProxyRunStartForm
        form = super().get_form(request, obj, **kwargs)
        if obj is None:
            _only_editable_studies(form, request.user)
            form.base_fields["learned_proxy"].queryset = LearnedProxy.objects.filter(
                status=LearnedProxy.Status.DONE,
                study__in=perms.studies_visible_to(request.user))
        return form

    def get_fields(self, request, obj=None):
        if obj is None:
            return ("study", "method", "criteria_keys", "backend_config", "template",
                    *(PARAM_PREFIX + name for name in _method_params()), "learned_proxy")
        return self.readonly_fields

    def get_readonly_fields(self, request, obj=None):
        return self.readonly_fields if obj else ()

    def save_model(self, request, obj, form, change):
        from .runs import proxy_run_start

        run = proxy_run_start(actor=request.user, source=ADMIN, **{
            "study": form.cleaned_data["study"], "method": form.cleaned_data["method"],
            "criteria": form.prepared["criteria"], "backend": form.prepared["backend"] or None,
            "template": form.cleaned_data.get("template", ""),
            "params": form.prepared["params"],
            "learned_proxy": form.cleaned_data.get("learned_proxy")})
        obj.pk = run.pk
        obj.__dict__.update({k: v for k, v in run.__dict__.items() if not k.startswith("_")})
        messages.info(request, f"Proxy run {run.pk} started on the {run.queue} queue as rater "
                               f"{run.rater.external_id}.")

    def has_change_permission(self, request, obj=None):
        return obj is None and super().has_change_permission(request, obj)

    @admin.action(description="Resume: judge what is still missing")
    def resume_runs(self, request, queryset):
        """Only runs of studies the user may change (editor or above); others are reported."""
        from .runs import proxy_run_resume

        resumed = 0
        for run in rows_with_role(request, queryset, perms.EDITOR,
                                  label=lambda run: f"proxy run {run.pk}"):
            try:
                proxy_run_resume(run, actor=request.user, source=ADMIN)
            except ValidationError as error:
                messages.error(request, " ".join(error.messages))
            else:
                resumed += 1
        messages.info(request, ngettext("%(count)d run sent to the workers again.",
                                        "%(count)d runs sent to the workers again.",
                                        resumed) % {"count": resumed})


# The run parameters' inputs, declared on the form class (the admin lists them by name).
ProxyRunStartForm = type("ProxyRunStartForm", (ProxyRunStartFormBase,), _param_fields())


class LearnedProxyStartForm(forms.ModelForm):
    params_config = settings_field(
        label="Parameters", names=("epochs", "target_precision", "model_path", "features"),
        lists=("features",),
        help_text="One setting a row, e.g. epochs: 3, target_precision: 0.9, features: wer, "
                  "bleu (metric names separated by commas; blank: the defaults).")

    class Meta:
        model = LearnedProxy
        fields = ("study", "criterion_key", "kind", "name")

    def clean(self):
        data = super().clean()
        if self.errors:
            return data
        from .training import learned_examples, learned_proxy_check

        try:
            params = data.get("params_config") or {}
            learned_proxy_check(study=data["study"], params=params, kind=data.get("kind", ""))
            kind = LEARNED_KINDS.get(data.get("kind", ""))
            if kind is not None and kind.pairwise:
                from .training import pairwise_examples

                pairwise_examples(data["study"], data["criterion_key"],
                                  features=params.get("features"))
            else:
                learned_examples(data["study"], data["criterion_key"])
        except ValidationError as error:
            raise forms.ValidationError(error.messages) from None
        return data


@admin.register(LearnedProxy)
class LearnedProxyAdmin(StudyScopedAdmin):
    list_display = ("pk", "name", "version", "kind", "study", "criterion_key", "status",
                    "test_auc", "created_at")
    list_filter = ("status", "kind", ("study", ONLY_VISIBLE))
    readonly_fields = ("name", "kind", "study", "criterion_key", "params", "version",
                       "artifact_path", "report", "status", "total", "done", "error",
                       "created_by", "created_at", "started_at", "finished_at", "pid", "host")

    def get_queryset(self, request):
        # Reading the list or a row fails at once a training whose process died on this host.
        from .training import learned_proxies_fail_dead

        learned_proxies_fail_dead()
        return super().get_queryset(request)

    @admin.display(description="test AUC")
    def test_auc(self, proxy):
        auc = (proxy.report.get("metrics") or {}).get("test_auc")
        return round(auc, 3) if isinstance(auc, float) else auc

    def get_form(self, request, obj=None, **kwargs):
        if obj is None:
            kwargs["form"] = LearnedProxyStartForm
        form = super().get_form(request, obj, **kwargs)
        if obj is None:
            _only_editable_studies(form, request.user)
        return form

    def get_fields(self, request, obj=None):
        if obj is None:
            return ("study", "criterion_key", "kind", "name", "params_config")
        return self.readonly_fields

    def get_readonly_fields(self, request, obj=None):
        return self.readonly_fields if obj else ()

    def save_model(self, request, obj, form, change):
        from .training import learned_proxy_start

        try:
            proxy = learned_proxy_start(
                study=form.cleaned_data["study"], criterion_key=form.cleaned_data["criterion_key"],
                kind=form.cleaned_data["kind"], name=form.cleaned_data.get("name") or "",
                params=form.cleaned_data.get("params_config") or {}, actor=request.user,
                source=ADMIN)
        except ValidationError as error:
            messages.error(request, "; ".join(error.messages))
            raise
        obj.pk = proxy.pk
        obj.__dict__.update({k: v for k, v in proxy.__dict__.items() if not k.startswith("_")})

    def has_change_permission(self, request, obj=None):
        return obj is None and super().has_change_permission(request, obj)


class JudgePromptVersionForm(forms.ModelForm):
    """Version 1 of a judge prompt (checked by the same service as the API): the criterion,
    method and template, and how the items are split for example-building."""

    criterion_key = forms.CharField(label="Criterion key")
    dev_fraction = forms.FloatField(initial=0.3, help_text="Share of the items reserved for "
                                    "few-shot examples (never evaluated).")
    seed = forms.IntegerField(initial=0, min_value=0)

    class Meta:
        model = JudgePromptVersion
        fields = ("study", "method", "template", "note")

    def clean(self):
        """The service's own checks of the criterion, the method, the split and an existing
        version 1, shown on their fields (the service checks them again when saving)."""
        from .versions import root_settings_check, split_items

        data = super().clean()
        study = data.get("study")
        if self.errors or study is None:
            return data
        checks = (("criterion_key", lambda: root_settings_check(
                      study, data.get("criterion_key"), data.get("method"), None)),
                  ("dev_fraction", lambda: split_items(
                      study, seed=data.get("seed") or 0, dev_fraction=data.get("dev_fraction"))))
        for field, check in checks:
            try:
                result = check()
            except ValidationError as error:
                message = " ".join(error.messages)
                self.add_error("method" if message.startswith("method") else field, message)
                continue
            if field == "criterion_key" and JudgePromptVersion.objects.filter(
                    study=study, criterion=result[0], method=result[1]).exists():
                self.add_error("criterion_key", (
                    f"{result[1]} on {result[0].key!r} already has a version 1; create the "
                    "next version from the list's action instead"))
        return data


@admin.register(JudgePromptVersion)
class JudgePromptVersionAdmin(StudyScopedAdmin):
    """Versioned judge prompts: list them, create version 1, and create the next version of
    selected ones from their latest run's disagreements with the raters (audited)."""

    list_display = ("pk", "study", "criterion", "method", "number", "parent", "n_examples",
                    "created_by", "created_at")
    list_filter = ("method", ("study", ONLY_VISIBLE))
    readonly_fields = ("study", "criterion", "method", "number", "parent", "template",
                       "examples", "example_outputs", "split", "source_run", "corrections",
                       "note", "created_by", "created_at")
    actions = ["create_next_versions"]

    @admin.display(description="examples")
    def n_examples(self, version):
        return len(version.examples or [])

    def get_form(self, request, obj=None, **kwargs):
        if obj is None:
            kwargs["form"] = JudgePromptVersionForm
        form = super().get_form(request, obj, **kwargs)
        if obj is None:
            _only_editable_studies(form, request.user)
        return form

    def get_fields(self, request, obj=None):
        if obj is None:
            return ("study", "criterion_key", "method", "template", "dev_fraction", "seed",
                    "note")
        return self.readonly_fields

    def get_readonly_fields(self, request, obj=None):
        return self.readonly_fields if obj else ()

    def save_model(self, request, obj, form, change):
        from .versions import judge_prompt_version_create

        data = form.cleaned_data
        try:
            version = judge_prompt_version_create(
                study=data["study"], criterion_key=data["criterion_key"], method=data["method"],
                template=data.get("template") or "", n_examples=0,
                dev_fraction=data["dev_fraction"], seed=data["seed"], note=data.get("note", ""),
                actor=request.user, source=ADMIN)
        except ValidationError as error:
            messages.error(request, "; ".join(error.messages))
            raise
        obj.pk = version.pk
        obj.__dict__.update({k: v for k, v in version.__dict__.items()
                             if not k.startswith("_")})

    def has_change_permission(self, request, obj=None):
        return obj is None and super().has_change_permission(request, obj)

    @admin.action(description="Create the next version from the raters' corrections")
    def create_next_versions(self, request, queryset):
        """Only versions of studies the user may change (editor or above)."""
        from .versions import judge_prompt_version_create

        for version in rows_with_role(request, queryset, perms.EDITOR,
                                      label=lambda v: f"prompt version {v.pk}"):
            try:
                created = judge_prompt_version_create(
                    study=version.study, base_version=version, actor=request.user,
                    source=ADMIN)
            except ValidationError as error:
                messages.error(request, f"{version}: " + " ".join(error.messages))
            else:
                messages.info(request, f"Created {created} with {len(created.examples)} "
                                       "examples.")
