from django.contrib import admin
from django.http import HttpResponsePermanentRedirect
from django.templatetags.static import static
from django.urls import include, path

from annotation.researcher_home import admin_index
from kit.health import healthz
from kit.login_throttle import ThrottledAdminAuthenticationForm, ThrottledLoginView

admin.site.site_header = "evalstudy"
admin.site.site_title = "evalstudy admin"
admin.site.index_title = "Studies, raters and results"
admin.site.login_form = ThrottledAdminAuthenticationForm
# The admin opens on the researcher's studies (annotation.researcher_home), Django's list of
# models below them.
admin.site.index_template = "admin/studies_home.html"

urlpatterns = [
    # Before the admin's own URLs: /admin/ (still reversed as "admin:index") is answered here.
    path("admin/", admin.site.admin_view(admin_index), name="studies_home"),
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
