"""The proxies' models, taken over from `metrics` (metrics.0004_move_proxies_out).

State only: the tables keep their names (`db_table`) and their rows, nothing is created or
copied. Then the content types of the three models move from app label "metrics" to "proxies":
permissions are tied to a content type, so a user or group that held `metrics.view_proxyrun`
holds `proxies.view_proxyrun` afterwards, and the admin log keeps pointing at the right model.
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

MOVED = ("proxyrun", "learnedproxy", "judgeresponse")


def _move_content_types(apps, source: str, target: str) -> None:
    """Relabel the moved models' content types from `source` to `target`, keeping their ids
    (the permissions and admin log entries that point at them).

    A row under `target` exists already only where something created it while the models were
    in the other app's state (post_migrate after a partial migration): the row under `source`
    is the one grants point at, so it wins and the other (its automatic permissions with it)
    is dropped."""
    from django.contrib.contenttypes.models import ContentType as CurrentContentType

    ContentType = apps.get_model("contenttypes", "ContentType")
    for model in MOVED:
        old = ContentType.objects.filter(app_label=source, model=model).first()
        if old is None:
            continue
        ContentType.objects.filter(app_label=target, model=model).delete()
        old.app_label = target
        old.save(update_fields=["app_label"])
    CurrentContentType.objects.clear_cache()  # cached by (app_label, model) in this process


def content_types_forward(apps, schema_editor):
    _move_content_types(apps, "metrics", "proxies")


def content_types_backward(apps, schema_editor):
    _move_content_types(apps, "proxies", "metrics")


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('evalstudy', '0006_rater_study_scope'),
        ('metrics', '0004_move_proxies_out'),
        ('contenttypes', '0002_remove_content_type_name'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='LearnedProxy',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('status', models.CharField(choices=[('pending', 'Pending'), ('running', 'Running'), ('done', 'Done'), ('failed', 'Failed')], default='pending', max_length=10)),
                        ('total', models.PositiveIntegerField(default=0)),
                        ('done', models.PositiveIntegerField(default=0)),
                        ('error', models.TextField(blank=True)),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('started_at', models.DateTimeField(blank=True, null=True)),
                        ('heartbeat_at', models.DateTimeField(blank=True, null=True)),
                        ('finished_at', models.DateTimeField(blank=True, null=True)),
                        ('name', models.SlugField(max_length=100)),
                        ('kind', models.CharField(choices=[('wer_bertscore', 'Logistic regression: WER rates + BERTScore'), ('embedding_lr', 'Logistic regression: embedding cosine + lengths'), ('cross_encoder', 'Fine-tuned cross-encoder classifier')], max_length=20)),
                        ('criterion_key', models.CharField(max_length=50)),
                        ('params', models.JSONField(blank=True, default=dict)),
                        ('artifact_path', models.CharField(blank=True, max_length=500)),
                        ('version', models.PositiveIntegerField(blank=True, null=True)),
                        ('report', models.JSONField(blank=True, default=dict, help_text='Split sizes, threshold, train/dev/test AUC.')),
                        ('created_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                        ('study', models.ForeignKey(blank=True, help_text='Trained on.', null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='learned_proxies', to='evalstudy.study')),
                    ],
                    options={
                        'verbose_name_plural': 'learned proxies',
                        'db_table': 'metrics_learnedproxy',
                        'ordering': ['-created_at'],
                        'abstract': False,
                    },
                ),
                migrations.CreateModel(
                    name='ProxyRun',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('status', models.CharField(choices=[('pending', 'Pending'), ('running', 'Running'), ('done', 'Done'), ('failed', 'Failed')], default='pending', max_length=10)),
                        ('total', models.PositiveIntegerField(default=0)),
                        ('done', models.PositiveIntegerField(default=0)),
                        ('error', models.TextField(blank=True)),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('started_at', models.DateTimeField(blank=True, null=True)),
                        ('heartbeat_at', models.DateTimeField(blank=True, null=True)),
                        ('finished_at', models.DateTimeField(blank=True, null=True)),
                        ('method', models.CharField(choices=[('latte', 'LATTE yes/no meaning preservation (P(yes))'), ('rubric', "Rubric / G-Eval scoring over the criterion's scale"), ('drpe', 'DRPE role-player pairwise vote'), ('learned', 'Learned proxy trained on human judgments')], max_length=10)),
                        ('criteria', models.JSONField(default=list, help_text='Criterion keys, in request order.')),
                        ('backend', models.JSONField(blank=True, default=dict, help_text='Judge backend settings (never the API key itself).')),
                        ('template', models.TextField(blank=True, help_text='Prompt template (blank: the default).')),
                        ('params', models.JSONField(blank=True, default=dict)),
                        ('signature', models.JSONField(blank=True, default=dict)),
                        ('queue', models.CharField(default='llm', max_length=10)),
                        ('failed', models.PositiveIntegerField(default=0, help_text='Answers that could not be read.')),
                        ('unreadable', models.JSONField(blank=True, default=dict, help_text='slot:criterion -> why no answer could be read.')),
                        ('usage', models.JSONField(blank=True, default=dict, help_text='Requests, cache hits, retries, tokens, seconds.')),
                        ('created_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                        ('learned_proxy', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='runs', to='proxies.learnedproxy')),
                        ('rater', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='proxy_runs', to='evalstudy.rater')),
                        ('study', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='proxy_runs', to='evalstudy.study')),
                    ],
                    options={
                        'db_table': 'metrics_proxyrun',
                        'ordering': ['-created_at'],
                        'abstract': False,
                    },
                ),
                migrations.CreateModel(
                    name='JudgeResponse',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('key', models.CharField(max_length=64)),
                        ('value', models.JSONField()),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('study', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='judge_responses', to='evalstudy.study')),
                    ],
                    options={
                        'db_table': 'metrics_judgeresponse',
                        'constraints': [models.UniqueConstraint(fields=('study', 'key'), name='judge_response_unique')],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(content_types_forward, content_types_backward),
    ]
