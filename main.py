"""Train / evaluate DLRM or DCNv2: `python main.py --help`. With no flags, the embedded demo.

Thin on purpose: flags become a `Config` in `dlrm.cli`, the work happens in `dlrm.train.trainer.run`.
Exit status: 0 on success, 1 when training diverged (NaN/inf loss) or a checkpoint is unusable.
"""
import sys


def main(argv=None) -> int:
    from dlrm.cli import parse_config

    config = parse_config(sys.argv[1:] if argv is None else argv)
    from dlrm.train import trainer
    from dlrm.train.checkpoint import CheckpointError

    try:
        trainer.run(config)
    except (trainer.NonFiniteLossError, CheckpointError) as error:
        print(f"error: {error}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
