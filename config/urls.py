from django.contrib import admin
from django.http import HttpResponsePermanentRedirect
from django.templatetags.static import static
from django.urls import include, path

from kit.health import healthz
from kit.login_throttle import ThrottledAdminAuthenticationForm, ThrottledLoginView

admin.site.site_header = "evalstudy"
admin.site.site_title = "evalstudy admin"
admin.site.index_title = "Studies, raters and results"
admin.site.login_form = ThrottledAdminAuthenticationForm

urlpatterns = [
    path("admin/", admin.site.urls),
    path("healthz", healthz, name="healthz"),
    # Browsers ask for /favicon.ico whatever the page links: send them to the icon (its
    # hashed static name is looked up per request, after collectstatic).
    path("favicon.ico", lambda request: HttpResponsePermanentRedirect(static("favicon.svg"))),
    path("accounts/login/", ThrottledLoginView.as_view(), name="login"),
    path("accounts/", include("django.contrib.auth.urls")),
    path("studies/", include("metrics.urls")),
    path("", include("analysis.urls")),
    path("", include("evalstudy.urls")),
    path("api/v1/", include("config.api_urls")),
    path("", include("prolific.urls")),
    path("", include("annotation.urls")),
]

# JSON errors (the API's error shape) under /api/, Django's pages elsewhere.
handler404 = "kit.rest.handler404"
handler500 = "kit.rest.handler500"
