from django.apps import AppConfig


class SandboxesConfig(AppConfig):
    name = "sandboxes"
    verbose_name = "Sandboxes"

    def ready(self) -> None:
        from django.db.models.signals import post_migrate

        from sandboxes.housekeeping.schedules import on_post_migrate

        # The lifecycle schedules (sweep, probes, reconciliation, warm pool) after every migrate.
        post_migrate.connect(on_post_migrate, sender=self, dispatch_uid="sandhub-schedules")

        from django_q.signals import post_spawn

        from sandboxes.tasks import recover_on_worker_start

        # Each new worker process (a restarted cluster, a reincarnated worker) takes back the
        # background commands whose supervisor died, at once (see supervise_background).
        post_spawn.connect(recover_on_worker_start, dispatch_uid="sandhub-background-recovery")

        from django_q.signals import pre_execute

        from sandboxes.housekeeping import workertasks

        # Each worker holds a liveness lease naming its task (housekeeping/liveness.py).
        post_spawn.connect(workertasks.on_worker_start, dispatch_uid="sandhub-worker-lease")
        pre_execute.connect(workertasks.on_task_start, dispatch_uid="sandhub-worker-task")

        from django.core import checks

        from sandboxes.proxy.sites import check_preview_site

        # A preview domain on the platform's own site (registrable domain) is warned about.
        checks.register(check_preview_site, checks.Tags.security)
