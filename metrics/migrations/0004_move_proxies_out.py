"""ProxyRun, LearnedProxy and JudgeResponse move to the `proxies` app.

State only: the tables stay where they are, under their names (the models set `db_table`), and
`proxies.0001_initial` takes them over in its state, so no row is copied or lost. The content
types (and with them the permissions granted on these models) are moved there too.
"""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('metrics', '0003_judge_response_per_study'),
        # Reads metrics.ProxyRun from the historical state: it must run while the model is here.
        ('evalstudy', '0006_rater_study_scope'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(name='ProxyRun'),
                migrations.DeleteModel(name='LearnedProxy'),
                migrations.DeleteModel(name='JudgeResponse'),
            ],
            database_operations=[],
        ),
    ]
