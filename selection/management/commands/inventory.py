from django.core.management.base import BaseCommand

from selection import inventory, pipeline
from selection.progress import Bar


class Command(BaseCommand):
    help = "Scan a PyTorch test tree into repo memory (incremental) and optionally query it."

    def add_arguments(self, parser):
        parser.add_argument("--tree", help="the test tree (default: TORCH_ROOT)")
        parser.add_argument("--sha", help="its PyTorch SHA (default: a hash of its test files)")
        parser.add_argument("--no-embed", action="store_true", help="skip the text embeddings")
        parser.add_argument(
            "--query", help='then list the tests matching this phrase ("skip autograd")'
        )
        parser.add_argument(
            "--files", action="store_true", help="with --query: match files instead"
        )

    def handle(self, *args, tree, sha, no_embed, query, files, **options):
        root = tree or pipeline.default_tree()
        bar = Bar()
        snapshot = inventory.scan(root, sha or pipeline.tree_sha(root), bar, embed=not no_embed)
        bar.close()
        self.stdout.write(f"snapshot {snapshot.pytorch_sha}: {snapshot.stats}")
        if query:
            for match in inventory.query(snapshot, query, "files" if files else "tests"):
                name = f"{match.path}::{match.class_name}::{match.test_name}".rstrip(":")
                self.stdout.write(f"  {match.score:.3f} {name}  {match.summary}")
