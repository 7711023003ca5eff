/* bench_template.c: how long rendering a chat template takes (`make bench-template`).
 *
 * Renders one 20-message conversation (a system prompt, then user/assistant turns of
 * about 200 bytes each, one of them a tool call followed by its result; one tool
 * declared) with the largest .jinja file in $SPINDLE_TESTDATA/templates (default
 * ../shared/testdata), and with the default model's own template when
 * models/SmolLM2-135M-Instruct.Q4_1.gguf is there. Each template is parsed PARSES
 * times and rendered WARMUP times untimed, then RENDERS times timed one by one; the
 * table on stdout gives the median parse time and the median and 99th-percentile
 * render times in microseconds, on one thread.
 *
 * usage: bench_template [--dump DIR] [RENDERS]      (default 2000)
 *   --dump DIR   also writes each template and its context as DIR/<n>.jinja and
 *                DIR/<n>.json and prints its rows as tab-separated values
 *                (name, source bytes, parse, render median, render p99, output bytes):
 *                bench/bench_template.py times jinja2 on the same files.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "gguf/gguf.h"
#include "template/template.h"
#include "bench/bench_clock.h"

#define BENCH_DEFAULT_RENDERS 2000
#define BENCH_WARMUP          200
#define BENCH_PARSES          200
#define BENCH_DEFAULT_MODEL   "models/SmolLM2-135M-Instruct.Q4_1.gguf"
#define BENCH_MAX_SOURCE      (1u << 20)

/* The conversation: 20 messages; the tool call and its result are messages 2 and 3. */
static const char *const BENCH_TURNS[] = {
    "I'm planning a three-day trip to Lisbon in early May with two friends. We like food markets, "
    "old neighbourhoods and a bit of live music in the evening. Could you sketch a relaxed itinerary "
    "that avoids too much walking uphill?",
    "Day 1 could stay in Baixa and Chiado: start at the Time Out Market for lunch, then take tram 28 "
    "up towards Graça for the viewpoint rather than walking. In the evening, Bairro Alto has small "
    "bars with fado; Tasca do Chico is popular, so arrive early.",
    "That sounds great. For day 2 we were thinking about Belém. Is it worth going there in the "
    "morning, and how do we get there cheaply from the centre without renting a car or taking taxis?",
    "Yes, mornings are best before the tour buses arrive. Tram 15E runs from Praça da Figueira to "
    "Belém in about 30 minutes and takes the Viva Viagem card. Visit the Jerónimos Monastery first, "
    "then the pastéis de Belém bakery, then the riverside walk.",
    "Perfect. One of my friends is vegetarian. Any tips for finding good vegetarian food in Lisbon, "
    "especially traditional Portuguese dishes that happen to be meat-free or can easily be adapted?",
    "Look for açorda (bread soup, ask for it without seafood), caldo verde without the chouriço, and "
    "grilled vegetables at the tascas. The Mercado de Campo de Ourique has vegetarian stalls, and "
    "Ao 26 Vegan Food Project near Chiado is well regarded.",
    "Thanks! On day 3 we might take a day trip to Sintra. Can we do Sintra and still be back in "
    "Lisbon for dinner? We'd rather not rush through the palaces, and we don't mind skipping one.",
    "You can: trains leave Rossio every 20 minutes and take about 40 minutes. Pick two sites, for "
    "example Pena Palace and Quinta da Regaleira, book Pena for a morning slot, and take the 434 bus "
    "between them. You'll be back in Lisbon by 18:00.",
    "What about money: should we carry cash, or are cards accepted almost everywhere? And is tipping "
    "expected in restaurants and cafés the way it is in the United States, or is it more relaxed?",
    "Cards work almost everywhere, but small tascas and market stalls sometimes prefer cash, so keep "
    "some euros. Tipping is relaxed: rounding up or leaving five to ten percent for good service at "
    "a sit-down meal is appreciated, not expected.",
    "Great. Last question for now: which neighbourhood would you recommend for our accommodation, "
    "given that we want to be close to public transport and restaurants but not too noisy at night?",
    "Príncipe Real or the quieter streets of Chiado are good compromises: close to the metro at "
    "Baixa-Chiado and Rato, plenty of restaurants, but calmer than Bairro Alto at night. Alfama is "
    "charming too, though hilly and farther from the metro.",
    "We booked a place in Chiado. Could you summarise the whole plan in a short list we can print, "
    "with the transport for each day and one backup idea in case it rains on one of the days?",
    "Day 1: Baixa, Chiado, tram 28 to Graça, fado in Bairro Alto. Day 2: tram 15E to Belém, monastery, "
    "bakery, riverside. Day 3: train from Rossio to Sintra, Pena and Regaleira. Rain backup: the "
    "Gulbenkian Museum and the Oceanário.",
    "Lovely, thank you. Do you know whether the Oceanário needs to be booked in advance in May, or "
    "can we just turn up? And roughly how long should we plan to spend there with a short lunch?",
    "Booking online is wise on weekends and holidays, mainly to skip the ticket queue; on weekdays "
    "you can usually turn up. Plan about two and a half hours, plus lunch at one of the restaurants "
    "along the Parque das Nações waterfront.",
    "And how do we get to Parque das Nações from Chiado? Is it a long trip on the metro, and do we "
    "need a different ticket for that line or does the same Viva Viagem card work on it?",
};

/* The value at fraction q of n sorted samples. */
static double bench_quantile(double *v, size_t n, double q) {
    qsort(v, n, sizeof *v, bench_cmp_double);
    return v[(size_t)(q * (double)(n - 1) + 0.5)];
}

/* The conversation as a template context (caller owns; json_decref). */
static json_t *bench_context(void) {
    json_t *messages = json_array();
    json_array_append_new(messages, json_pack("{s:s, s:s}", "role", "system", "content",
                                              "You are a friendly, well-informed travel assistant. Answer concisely, "
                                              "give concrete names, times and prices where you know them, and say so "
                                              "plainly when you are not sure. Prefer public transport and walking."));
    json_array_append_new(messages, json_pack("{s:s, s:s}", "role", "user", "content", BENCH_TURNS[0]));
    json_array_append_new(messages,
                          json_pack("{s:s, s:s, s:[{s:s, s:s, s:{s:s, s:{s:s, s:s, s:i}}}]}", "role", "assistant",
                                    "content", "", "tool_calls", "id", "a1b2c3d4e", "type", "function", "function",
                                    "name", "get_weather", "arguments", "city", "Lisbon", "month", "May", "days", 3));
    json_array_append_new(messages, json_pack("{s:s, s:s, s:s, s:s}", "role", "tool", "tool_call_id", "a1b2c3d4e",
                                              "name", "get_weather", "content",
                                              "{\"city\": \"Lisbon\", \"forecast\": [{\"day\": 1, \"high_c\": 22, "
                                              "\"low_c\": 14, \"sky\": \"sunny\"}, {\"day\": 2, \"high_c\": 21, "
                                              "\"low_c\": 13, \"sky\": \"partly cloudy\"}, {\"day\": 3, \"high_c\": "
                                              "19, \"low_c\": 13, \"sky\": \"showers\"}]}"));
    for (size_t i = 1; i < sizeof BENCH_TURNS / sizeof BENCH_TURNS[0]; i++) {
        json_array_append_new(messages,
                              json_pack("{s:s, s:s}", "role", i % 2 ? "assistant" : "user", "content", BENCH_TURNS[i]));
    }
    json_t *tools =
        json_pack("[{s:s, s:{s:s, s:s, s:{s:s, s:{s:{s:s, s:s}, s:{s:s, s:s}, s:{s:s}}, s:[s]}}}]", "type", "function",
                  "function", "name", "get_weather", "description", "Get the weather forecast for a city", "parameters",
                  "type", "object", "properties", "city", "type", "string", "description", "City name", "month", "type",
                  "string", "description", "Month of the trip", "days", "type", "integer", "required", "city");
    json_t *context = json_pack("{s:o, s:o, s:b, s:s, s:s}", "messages", messages, "tools", tools,
                                "add_generation_prompt", 1, "bos_token", "<s>", "eos_token", "</s>");
    if (!context || json_array_size(messages) != 20) {
        fprintf(stderr, "bench_template: building the conversation failed\n");
        exit(1);
    }
    return context;
}

static const char *bench_dump_dir; /* --dump */

/* Writes the template and its context for the jinja2 side of the comparison. */
static bool bench_dump(int index, const char *source, size_t len, const json_t *context) {
    char path[1200];
    snprintf(path, sizeof path, "%s/%d.jinja", bench_dump_dir, index);
    FILE *fp = fopen(path, "wb");
    if (!fp || fwrite(source, 1, len, fp) != len || fclose(fp) != 0) {
        fprintf(stderr, "bench_template: cannot write %s\n", path);
        return false;
    }
    snprintf(path, sizeof path, "%s/%d.json", bench_dump_dir, index);
    if (json_dump_file(context, path, JSON_INDENT(1) | JSON_PRESERVE_ORDER) != 0) {
        fprintf(stderr, "bench_template: cannot write %s\n", path);
        return false;
    }
    return true;
}

/* Times source: prints one table row, or a line on stderr and returns false on failure. */
static bool bench_one(const char *name, const char *source, size_t len, const json_t *context, size_t renders) {
    static int index;
    if (bench_dump_dir && !bench_dump(index++, source, len, context)) return false;
    double *samples = malloc(sizeof(double) * (renders > BENCH_PARSES ? renders : BENCH_PARSES));
    char *out = NULL;
    size_t out_len = 0;
    tmpl *t = NULL;
    if (!samples) {
        fprintf(stderr, "bench_template: out of memory\n");
        return false;
    }
    for (size_t i = 0; i < BENCH_PARSES; i++) {
        double t0 = bench_now_us();
        if (tmpl_parse(source, len, &t) != SP_OK) {
            fprintf(stderr, "bench_template: %s: %s\n", name, sp_last_error());
            free(samples);
            return false;
        }
        samples[i] = bench_now_us() - t0;
        if (i + 1 < BENCH_PARSES) tmpl_destroy(t);
    }
    double parse_med = bench_quantile(samples, BENCH_PARSES, 0.5);
    for (size_t i = 0; i < BENCH_WARMUP + renders; i++) {
        double t0 = bench_now_us();
        sp_status st = tmpl_render(t, context, NULL, &out, &out_len);
        double dt = bench_now_us() - t0;
        if (st != SP_OK) {
            fprintf(stderr, "bench_template: %s: %s\n", name, sp_last_error());
            tmpl_destroy(t);
            free(samples);
            return false;
        }
        if (i + 1 < BENCH_WARMUP + renders) free(out);
        if (i >= BENCH_WARMUP) samples[i - BENCH_WARMUP] = dt;
    }
    if (bench_dump_dir) { /* the rendered text, for the byte-for-byte check */
        char path[1200];
        snprintf(path, sizeof path, "%s/%d.out", bench_dump_dir, index - 1);
        FILE *fp = fopen(path, "wb");
        if (fp) {
            fwrite(out, 1, out_len, fp);
            fclose(fp);
        }
    }
    free(out);
    double med = bench_quantile(samples, renders, 0.5), p99 = bench_quantile(samples, renders, 0.99);
    if (bench_dump_dir)
        printf("%s\t%zu\t%.2f\t%.2f\t%.2f\t%zu\n", name, len, parse_med, med, p99, out_len);
    else
        printf("| %s | %zu | %.1f | %.1f | %.1f | %zu |\n", name, len, parse_med, med, p99, out_len);
    tmpl_destroy(t);
    free(samples);
    return true;
}

/* The largest *.jinja file in dir (ties: the first by name); false when none. */
static bool bench_largest_template(const char *dir, char *path, size_t cap) {
    DIR *d = opendir(dir);
    if (!d) return false;
    off_t best = -1;
    char best_name[256] = "";
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n < 7 || strcmp(e->d_name + n - 6, ".jinja") != 0 || n >= sizeof best_name) continue;
        char p[1300];
        struct stat sb;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (stat(p, &sb) != 0 || !S_ISREG(sb.st_mode)) continue;
        if (sb.st_size > best || (sb.st_size == best && strcmp(e->d_name, best_name) < 0)) {
            best = sb.st_size;
            snprintf(best_name, sizeof best_name, "%s", e->d_name);
        }
    }
    closedir(d);
    if (best < 0) return false;
    snprintf(path, cap, "%s/%s", dir, best_name);
    return true;
}

/* Reads path (at most BENCH_MAX_SOURCE bytes) into *out (caller frees). */
static bool bench_read_file(const char *path, char **out, size_t *len) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return false;
    char *buf = malloc(BENCH_MAX_SOURCE + 1);
    size_t n = buf ? fread(buf, 1, BENCH_MAX_SOURCE + 1, fp) : 0;
    bool ok = buf && !ferror(fp) && n <= BENCH_MAX_SOURCE;
    fclose(fp);
    if (!ok) {
        free(buf);
        return false;
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return true;
}

int main(int argc, char **argv) {
    size_t renders = BENCH_DEFAULT_RENDERS;
    int arg = 1;
    if (arg + 1 < argc && strcmp(argv[arg], "--dump") == 0) {
        bench_dump_dir = argv[arg + 1];
        arg += 2;
    }
    if ((arg < argc && (renders = strtoul(argv[arg], NULL, 10)) == 0) || arg + 1 < argc) {
        fprintf(stderr, "usage: bench_template [--dump DIR] [RENDERS]\n");
        return 2;
    }
    const char *testdata = getenv("SPINDLE_TESTDATA");
    if (!testdata || !testdata[0]) testdata = "../shared/testdata";
    char dir[1024], path[1300];
    snprintf(dir, sizeof dir, "%s/templates", testdata);

    json_t *context = bench_context();
    if (!bench_dump_dir) {
        printf("## Chat-template rendering\n\n"
               "20 messages (a system prompt, user/assistant turns of ~200 bytes, one tool call and its "
               "result), one tool; median of %d parses; %zu renders after %d warm-up renders; one thread; "
               "times in microseconds.\n\n",
               BENCH_PARSES, renders, BENCH_WARMUP);
        printf("| template | source bytes | parse (median) | render (median) | render (p99) | output bytes |\n"
               "|---|---:|---:|---:|---:|---:|\n");
    }
    int rows = 0, failed = 0;

    char *source = NULL;
    size_t len = 0;
    if (!bench_largest_template(dir, path, sizeof path)) {
        fprintf(stderr, "bench_template: no .jinja files in %s; skipped (set SPINDLE_TESTDATA)\n", dir);
    } else if (!bench_read_file(path, &source, &len)) {
        fprintf(stderr, "bench_template: cannot read %s; skipped\n", path);
    } else {
        const char *name = strrchr(path, '/') + 1;
        if (bench_one(name, source, len, context, renders))
            rows++;
        else
            failed++;
        free(source);
    }

    gguf_file *f;
    if (gguf_open(BENCH_DEFAULT_MODEL, &f) != SP_OK) {
        fprintf(stderr, "bench_template: %s; skipped\n", sp_last_error());
    } else {
        json_t *model_context = json_deep_copy(context);
        json_object_del(model_context, "bos_token"); /* the model's own special tokens instead */
        json_object_del(model_context, "eos_token");
        source = NULL;
        if (tmpl_source_from_gguf(f, &source, &len) != SP_OK ||
            tmpl_context_add_special_tokens(f, model_context) != SP_OK) {
            fprintf(stderr, "bench_template: %s\n", sp_last_error());
            failed++;
        } else if (bench_one("SmolLM2-135M-Instruct (model's own)", source, len, model_context, renders)) {
            rows++;
        } else {
            failed++;
        }
        free(source);
        json_decref(model_context);
        gguf_close(f);
    }
    if (rows == 0 && failed == 0 && !bench_dump_dir) printf("\n(nothing to measure: no templates found)\n");
    json_decref(context);
    return failed ? 1 : 0;
}
