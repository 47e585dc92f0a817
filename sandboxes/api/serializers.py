"""REST request and response shapes.

Responses are views of the service results (sandboxes.contract.results via its shapes), and
drf-pydantic makes each one's DRF serializer from its fields: types become DRF fields,
descriptions their help_text, optional ones allow_null, so the OpenAPI schema documents them
without a second copy. Request serializers only check types and limits (the services decide
everything else).
"""

from __future__ import annotations

from typing import Any

import drf_pydantic
from django.conf import settings
from drf_pydantic.base_model import ModelMetaclass as DrfModelMetaclass
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from sandboxes.contract import results
from sandboxes.contract.shapes import Shape, ShapeMeta
from sandboxes.policy.validation import MAX_COMMAND_CHARS, MAX_NAME_CHARS, WORKSPACE
from sandboxes.services import MAX_TAIL_LINES
from sandboxes.services.workflows import DEFAULT_TEST_COMMAND


class StrictSerializer(serializers.Serializer):
    """Refuses fields it does not know, instead of silently dropping a misspelt option."""

    def to_internal_value(self, data: Any) -> Any:
        if hasattr(data, "keys"):
            unknown = sorted(set(data.keys()) - set(self.fields))
            if unknown:
                raise serializers.ValidationError(
                    {name: ["unknown field"] for name in unknown}
                    | {"non_field_errors": [f"known fields: {', '.join(sorted(self.fields))}"]}
                )
        return super().to_internal_value(data)


# DRF's number fields take JSON true and false as 1 and 0 (`"timeout": true` was a one-second
# timeout): these refuse them.
NOT_A_BOOLEAN = "A number is required, not true or false."


class FloatField(serializers.FloatField):
    default_error_messages = {"boolean": NOT_A_BOOLEAN}

    def to_internal_value(self, data: Any) -> float:
        if isinstance(data, bool):
            self.fail("boolean")
        return super().to_internal_value(data)


class IntegerField(serializers.IntegerField):
    default_error_messages = {"boolean": NOT_A_BOOLEAN}

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool):
            self.fail("boolean")
        return super().to_internal_value(data)


NETWORK_MODES = ("off", "allowlist", "public")


@extend_schema_field(
    {
        "oneOf": [{"type": "boolean"}, {"type": "string", "enum": list(NETWORK_MODES)}],
        "description": "off (no network), allowlist (only allowed names, through the egress "
        "proxy) or public (the internet through the proxy; private ranges refused); true: "
        "the most the team allows, false: off.",
    }
)
class NetworkField(serializers.Field):
    """A sandbox's network: true or false, or a mode's name."""

    default_error_messages = {
        "invalid": "Expected true, false, or one of: " + ", ".join(NETWORK_MODES) + "."
    }

    def to_internal_value(self, data: Any) -> bool | str:
        if isinstance(data, bool) or data in NETWORK_MODES:
            return data
        self.fail("invalid")
        raise AssertionError  # fail() raised

    def to_representation(self, value: Any) -> Any:
        return value


# --- responses -------------------------------------------------------------------------------


class _RestShapeMeta(ShapeMeta, DrfModelMetaclass):
    """Fields from the result first (ShapeMeta), then the serializer from them (drf-pydantic)."""


class RestShape(Shape, drf_pydantic.BaseModel, metaclass=_RestShapeMeta):
    """A view of a result with a DRF serializer, `drf_serializer`, named after the view (so
    the OpenAPI component of `Sandbox` is "Sandbox")."""


class Sandbox(RestShape, source=results.SandboxInfo):
    pass


class Command(RestShape, source=results.CommandResult):
    pass


class BackgroundCheck(RestShape, source=results.BackgroundCheck):
    pass


class Host(RestShape, source=results.HostInfo, exclude=("last_error", "details")):
    pass


class FileEntry(RestShape, source=results.FileEntry):
    pass


class UploadResult(RestShape, source=results.UploadResult):
    pass


class TestFailure(RestShape, source=results.TestFailure):
    __test__ = False  # not a pytest test class


class TestReport(
    RestShape,
    source=results.TestReport,
    types={"failures": list[TestFailure], "result": Command},
):
    __test__ = False


class RunOnceResult(RestShape, source=results.RunOnceResult, types={"result": Command}):
    pass


SandboxSerializer = Sandbox.drf_serializer
CommandSerializer = Command.drf_serializer
BackgroundCheckSerializer = BackgroundCheck.drf_serializer
HostSerializer = Host.drf_serializer
FileEntrySerializer = FileEntry.drf_serializer
UploadResultSerializer = UploadResult.drf_serializer
TestReportSerializer = TestReport.drf_serializer
RunOnceResultSerializer = RunOnceResult.drf_serializer


class ErrorSerializer(serializers.Serializer):
    detail = serializers.CharField(help_text="What is wrong, in one sentence.")
    code = serializers.CharField(help_text="A machine code: invalid, not_found, forbidden, ...")

    def get_fields(self) -> dict[str, serializers.Field]:
        # `fields` is the serializer's own attribute: the field of that name is added here.
        fields = dict(super().get_fields())
        fields["fields"] = serializers.DictField(
            child=serializers.CharField(),
            required=False,
            help_text="Invalid input only: each wrong field (files[0].path for nested ones) "
            "and what is wrong with it.",
        )
        return fields


# --- requests --------------------------------------------------------------------------------


class SandboxCreateSerializer(StrictSerializer):
    image = serializers.CharField(required=False, max_length=100, help_text="Default if omitted.")
    name = serializers.CharField(required=False, allow_blank=True, max_length=MAX_NAME_CHARS)
    cpus = FloatField(required=False, min_value=0.01, max_value=64)
    memory_mb = IntegerField(required=False, min_value=1, max_value=1024 * 1024)
    disk_mb = IntegerField(
        required=False, min_value=64, max_value=1024 * 1024, help_text="Size of /workspace."
    )
    env = serializers.DictField(child=serializers.CharField(allow_blank=True), required=False)
    lifetime_minutes = IntegerField(required=False, min_value=1, max_value=525600)
    network = NetworkField(required=False)
    allow = serializers.ListField(
        child=serializers.CharField(max_length=260),
        required=False,
        max_length=100,
        help_text="Allow-list mode: a narrower list for this sandbox, each entry within the "
        "team's allow-list (omit: the team's whole list), like \"pypi.org\" or "
        '"*.pythonhosted.org:443".',
    )
    gpus = IntegerField(
        required=False,
        min_value=0,
        max_value=16,
        help_text="GPUs of its own (CUDA_VISIBLE_DEVICES).",
    )
    snapshot_id = serializers.CharField(
        required=False,
        max_length=40,
        source="snapshot",
        help_text="Start from this snapshot's files, with its image and limits unless given.",
    )
    request_id = serializers.CharField(
        required=False,
        max_length=100,
        help_text="Your own id for this request: a retry with it returns the same sandbox.",
    )


class RunCommandSerializer(StrictSerializer):
    command = serializers.CharField(max_length=MAX_COMMAND_CHARS, trim_whitespace=False)
    cwd = serializers.CharField(required=False, max_length=4096, default=WORKSPACE)
    env = serializers.DictField(child=serializers.CharField(allow_blank=True), required=False)
    timeout = FloatField(
        required=False, min_value=0.001, max_value=settings.SANDHUB_MAX_TIMEOUT_SECONDS
    )
    output_cap = IntegerField(
        required=False, min_value=1, max_value=settings.SANDHUB_OUTPUT_CAP_BYTES
    )


class RunTestsSerializer(RunCommandSerializer):
    """A test run: the command, how to find its JUnit report, and run_command's options."""

    command = serializers.CharField(
        required=False,
        default=DEFAULT_TEST_COMMAND,
        max_length=MAX_COMMAND_CHARS,
        trim_whitespace=False,
        help_text="Test command. With junit_report (the default) '--junitxml=<report>' is "
        "appended, which suits pytest.",
    )
    junit_report = serializers.BooleanField(
        required=False,
        default=True,
        help_text="Append --junitxml to the command and read the report.",
    )
    report_path = serializers.CharField(
        required=False,
        allow_null=True,
        default=None,
        max_length=4096,
        help_text="Read a JUnit XML report the command writes itself (other test runners); "
        "nothing is appended then.",
    )


class InlineFileSerializer(StrictSerializer):
    """A file given inline: text, or base64 for any bytes."""

    path = serializers.CharField(max_length=4096, help_text=f"Path inside {WORKSPACE}.")
    content = serializers.CharField(
        allow_blank=True, trim_whitespace=False, help_text="Text, or base64 (encoding)."
    )
    encoding = serializers.ChoiceField(choices=["text", "base64"], default="text")
    executable = serializers.BooleanField(default=False, help_text="Mode 755 instead of 644.")


class RunOnceSerializer(RunCommandSerializer):
    """One command in a throwaway sandbox: its files, image and run_command's options."""

    cwd = None  # type: ignore[assignment]  # it runs in /workspace of a fresh sandbox
    files = serializers.ListField(
        child=InlineFileSerializer(),
        required=False,
        max_length=1000,
        help_text=f"Files to write into {WORKSPACE} before running.",
    )
    image = serializers.CharField(required=False, max_length=100, help_text="Default if omitted.")


class StartBackgroundSerializer(StrictSerializer):
    command = serializers.CharField(max_length=MAX_COMMAND_CHARS, trim_whitespace=False)
    cwd = serializers.CharField(required=False, max_length=4096, default=WORKSPACE)
    env = serializers.DictField(child=serializers.CharField(allow_blank=True), required=False)
    max_runtime_seconds = FloatField(
        required=False,
        min_value=0.001,
        max_value=settings.SANDHUB_MAX_TIMEOUT_SECONDS,
        help_text="Killed inside the sandbox (status timed_out) after this long; default "
        "and maximum SANDHUB_MAX_TIMEOUT_SECONDS.",
    )


class BackgroundCheckQuerySerializer(serializers.Serializer):
    tail_lines = IntegerField(
        required=False,
        default=50,
        min_value=0,
        max_value=MAX_TAIL_LINES,
        help_text="How many of the log's last lines to return.",
    )


class UploadFormSerializer(serializers.Serializer):
    """For the schema: multipart upload, every file part goes into `path` (a directory)."""

    path = serializers.CharField(required=False, help_text=f"Directory, default {WORKSPACE}.")
    file = serializers.ListField(child=serializers.FileField())
