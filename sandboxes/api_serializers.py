"""REST input and output shapes. Output serializers read the services' result objects; input
serializers only check types and limits (the services decide everything else)."""

from __future__ import annotations

from django.conf import settings
from rest_framework import serializers

from sandboxes.services import MAX_TAIL_LINES
from sandboxes.validation import MAX_COMMAND_CHARS, MAX_NAME_CHARS, WORKSPACE


class StrictSerializer(serializers.Serializer):
    """Refuses fields it does not know, instead of silently dropping a misspelt option."""

    def to_internal_value(self, data):
        if hasattr(data, "keys"):
            unknown = sorted(set(data.keys()) - set(self.fields))
            if unknown:
                raise serializers.ValidationError(
                    {name: ["unknown field"] for name in unknown}
                    | {"non_field_errors": [f"known fields: {', '.join(sorted(self.fields))}"]}
                )
        return super().to_internal_value(data)


# --- output ----------------------------------------------------------------------------------


class SandboxSerializer(serializers.Serializer):
    id = serializers.CharField()
    name = serializers.CharField()
    team = serializers.CharField()
    owner = serializers.CharField(allow_null=True)
    host = serializers.CharField(allow_null=True)
    image = serializers.CharField()
    status = serializers.CharField()
    status_message = serializers.CharField()
    cpus = serializers.FloatField()
    memory_mb = serializers.IntegerField()
    pids_limit = serializers.IntegerField()
    network = serializers.BooleanField()
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    last_activity_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField(allow_null=True)


class CommandSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    sandbox_id = serializers.CharField()
    command = serializers.CharField()
    kind = serializers.CharField()
    status = serializers.CharField()
    exit_code = serializers.IntegerField(allow_null=True)
    stdout = serializers.CharField(help_text="Head and tail when long, with a cut mark.")
    stderr = serializers.CharField()
    stdout_truncated = serializers.BooleanField()
    stderr_truncated = serializers.BooleanField()
    stdout_bytes = serializers.IntegerField(help_text="Bytes written, including any cut.")
    stderr_bytes = serializers.IntegerField()
    duration_seconds = serializers.FloatField(allow_null=True)
    error_message = serializers.CharField()
    channel = serializers.CharField()
    actor = serializers.CharField(allow_null=True)
    created_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)
    background = serializers.BooleanField(
        help_text="Started in the background: follow it at .../background/{id}/."
    )


class BackgroundCheckSerializer(serializers.Serializer):
    id = serializers.IntegerField(help_text="The command's id, returned when it was started.")
    sandbox_id = serializers.CharField()
    command = serializers.CharField()
    status = serializers.CharField(
        help_text="running, succeeded, failed (non-zero exit), timed_out (killed at its "
        "max_runtime_seconds), cancelled, or error."
    )
    running = serializers.BooleanField()
    exit_code = serializers.IntegerField(allow_null=True, help_text="Null while it runs.")
    output = serializers.CharField(
        help_text="The last tail_lines lines of its log, stdout and stderr interleaved."
    )
    output_truncated = serializers.BooleanField(help_text="False: output is the whole log.")
    output_bytes = serializers.IntegerField(help_text="Size of the whole log so far.")
    elapsed_seconds = serializers.FloatField(allow_null=True)
    max_runtime_seconds = serializers.FloatField()
    log_path = serializers.CharField(help_text="The whole log, in the sandbox (files API).")
    error_message = serializers.CharField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)


class HostSerializer(serializers.Serializer):
    name = serializers.CharField()
    kind = serializers.CharField()
    private = serializers.BooleanField()
    enabled = serializers.BooleanField()
    draining = serializers.BooleanField()
    healthy = serializers.BooleanField()
    idle_score = serializers.FloatField(help_text="1 = idle, 0 = saturated.")
    cpu_percent = serializers.FloatField(allow_null=True)
    memory_percent = serializers.FloatField(allow_null=True)
    gpu_percent = serializers.FloatField(allow_null=True)
    sandboxes_running = serializers.IntegerField()
    max_sandboxes = serializers.IntegerField()
    last_probe_at = serializers.DateTimeField(allow_null=True)


class FileEntrySerializer(serializers.Serializer):
    name = serializers.CharField()
    path = serializers.CharField()
    kind = serializers.CharField(help_text="file, dir, link or other")
    size = serializers.IntegerField()
    mtime = serializers.FloatField()
    mode = serializers.CharField()


class UploadResultSerializer(serializers.Serializer):
    sandbox_id = serializers.CharField()
    paths = serializers.ListField(child=serializers.CharField())
    total_bytes = serializers.IntegerField()


class ErrorSerializer(serializers.Serializer):
    detail = serializers.CharField()
    code = serializers.CharField()


# --- input -----------------------------------------------------------------------------------


class SandboxCreateSerializer(StrictSerializer):
    image = serializers.CharField(required=False, max_length=100, help_text="Default if omitted.")
    name = serializers.CharField(required=False, allow_blank=True, max_length=MAX_NAME_CHARS)
    cpus = serializers.FloatField(required=False, min_value=0.01, max_value=64)
    memory_mb = serializers.IntegerField(required=False, min_value=1, max_value=1024 * 1024)
    env = serializers.DictField(child=serializers.CharField(allow_blank=True), required=False)
    lifetime_minutes = serializers.IntegerField(required=False, min_value=1, max_value=525600)
    network = serializers.BooleanField(required=False)


class RunCommandSerializer(StrictSerializer):
    command = serializers.CharField(max_length=MAX_COMMAND_CHARS, trim_whitespace=False)
    cwd = serializers.CharField(required=False, max_length=4096, default=WORKSPACE)
    env = serializers.DictField(child=serializers.CharField(allow_blank=True), required=False)
    timeout = serializers.FloatField(
        required=False, min_value=0.001, max_value=settings.SANDHUB_MAX_TIMEOUT_SECONDS
    )
    output_cap = serializers.IntegerField(
        required=False, min_value=1, max_value=settings.SANDHUB_OUTPUT_CAP_BYTES
    )


class StartBackgroundSerializer(StrictSerializer):
    command = serializers.CharField(max_length=MAX_COMMAND_CHARS, trim_whitespace=False)
    cwd = serializers.CharField(required=False, max_length=4096, default=WORKSPACE)
    env = serializers.DictField(child=serializers.CharField(allow_blank=True), required=False)
    max_runtime_seconds = serializers.FloatField(
        required=False,
        min_value=0.001,
        max_value=settings.SANDHUB_MAX_TIMEOUT_SECONDS,
        help_text="Killed inside the sandbox (status timed_out) after this long; default "
        "and maximum SANDHUB_MAX_TIMEOUT_SECONDS.",
    )


class BackgroundCheckQuerySerializer(serializers.Serializer):
    tail_lines = serializers.IntegerField(
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
