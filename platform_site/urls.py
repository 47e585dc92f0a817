from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", include("sandboxes.api.urls")),
    path("e2b/", include("e2b_compat.urls")),  # E2B's SDKs: E2B_API_URL=<site>/e2b
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    # Swagger UI from drf-spectacular-sidecar's static files (SWAGGER_UI_DIST = SIDECAR): no CDN.
    # The split view serves its init script at ?script rather than inline, which the
    # Content-Security-Policy (platform_site/csp.py) would block.
    path(
        "api/docs/",
        SpectacularSwaggerSplitView.as_view(url_name="api-schema"),
        name="api-docs",
    ),
    path("", include("sandboxes.web.urls")),  # the team web pages: Home, Hosts, API keys, Team
]

# Unknown addresses and errors no view answered: JSON under /api/, pages elsewhere.
handler404 = "platform_site.errors.not_found"
handler403 = "platform_site.errors.permission_denied"
handler500 = "platform_site.errors.server_error"
