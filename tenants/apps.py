from django.apps import AppConfig


class TenantsConfig(AppConfig):
    name = "tenants"
    verbose_name = "Teams and access"

    def ready(self) -> None:
        # Connects the post_migrate handler that makes the rate limits' cache table.
        import tenants.ratelimits  # noqa: F401
