from django.core.management.base import BaseCommand

from selection import inventory, opindex, pipeline
from selection.progress import Bar


class Command(BaseCommand):
    help = "Run test files under the operator capture and update the operator index."

    def add_arguments(self, parser):
        parser.add_argument(
            "files", nargs="*", help="test files relative to the tree (default: all)"
        )
        parser.add_argument("--tree", help="the test tree (default: TORCH_ROOT)")
        parser.add_argument("--device", help="capture on this device module instead of the CPU")

    def handle(self, *args, files, tree, device, **options):
        root = (tree and __import__("pathlib").Path(tree).resolve()) or pipeline.default_tree()
        chosen = files or [str(p) for p in inventory.test_files(root)]
        bar = Bar()
        result = opindex.capture(root, chosen, device_module=device, progress=bar)
        bar.close()
        self.stdout.write(
            f"captured {result.tests} tests ({result.variants} variants) in {result.processes} "
            f"process(es); {result.rows} op rows"
            + (f"; lost {result.lost_files}" if result.lost_files else "")
        )
