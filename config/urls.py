from django.contrib import admin
from django.urls import include, path

admin.site.site_header = "evalstudy"
admin.site.site_title = "evalstudy admin"
admin.site.index_title = "Studies, raters and results"

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    path("studies/", include("metrics.urls")),
    path("", include("annotation.urls")),
]
