#include <stdio.h>
#include "count.h"

int main(void) {
    const struct { const char *text; size_t words; } cases[] = {
        {"", 0}, {"one", 1}, {"  two  words ", 2}, {"a\tb\nc", 3},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (count_words(cases[i].text) != cases[i].words) {
            fprintf(stderr, "case %zu failed\n", i);
            return 1;
        }
    }
    puts("count_words: 4 cases passed");
    return 0;
}
