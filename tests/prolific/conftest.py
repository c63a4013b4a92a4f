# The Prolific fixtures (a fake of Prolific's API on loopback, a world of studies and users)
# for every test module here.
from tests.prolific.test_prolific import fake, world  # noqa: F401
