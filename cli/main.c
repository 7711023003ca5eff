/* main.c: the spindle binary's entry point: picks the subcommand and hands over.
 * Only main decides how the process ends. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

#define SPINDLE_VERSION "0.1.0"

static void usage(FILE *out) {
    fprintf(out,
            "spindle %s: an LLM inference server in C\n"
            "\n"
            "usage: spindle [command] [options]\n"
            "\n"
            "commands:\n"
            "  serve      serve the OpenAI API (the default; see spindle serve --help)\n"
            "  generate   generate a continuation of --prompt (see spindle generate --help)\n"
            "  inspect    print a GGUF model's metadata and tensor table\n"
            "  bench      measure prompt processing and generation speed\n"
            "  template   render a chat template with a JSON context (see spindle template --help)\n"
            "  quantize   write a GGUF model with its weights in Q8_0, Q4_0, Q4_1 or F16\n"
            "  help       show this text\n",
            SPINDLE_VERSION);
}

int main(int argc, char **argv) {
    /* no command, or flags first: serve */
    if (argc < 2 || (argv[1][0] == '-' && strcmp(argv[1], "--help") != 0 && strcmp(argv[1], "-h") != 0 &&
                     strcmp(argv[1], "--version") != 0))
        return cmd_serve(argc, argv);
    if (strcmp(argv[1], "help") == 0 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "serve") == 0) return cmd_serve(argc - 1, argv + 1);
    if (strcmp(argv[1], "--version") == 0) {
        printf("spindle %s\n", SPINDLE_VERSION);
        return 0;
    }
    if (strcmp(argv[1], "generate") == 0) return cmd_generate(argc - 1, argv + 1);
    if (strcmp(argv[1], "inspect") == 0) return cmd_inspect(argc - 1, argv + 1);
    if (strcmp(argv[1], "bench") == 0) return cmd_bench(argc - 1, argv + 1);
    if (strcmp(argv[1], "template") == 0) return cmd_template(argc - 1, argv + 1);
    if (strcmp(argv[1], "quantize") == 0) return cmd_quantize(argc - 1, argv + 1);
    fprintf(stderr, "spindle: error: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
