"""The toy task with a slow reward, so a test can SIGKILL the trainer mid-run."""

import time

from jaxtom.rl.toy import TargetTokenReward, toy_token_tasks


class SlowReward(TargetTokenReward):
    def __call__(self, completions, tasks):
        time.sleep(0.3)
        return super().__call__(completions, tasks)


def factory(config):
    return (toy_token_tasks(config.task.num_prompts, config.task.prompt_len,
                            config.model.vocab_size, seed=config.trainer.seed),
            SlowReward(config.task.target_token))
