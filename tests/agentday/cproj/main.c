#include <stdio.h>
#include "count.h"

int main(void) {
    char line[4096];
    size_t words = 0, lines = 0;
    while (fgets(line, sizeof line, stdin)) {
        words += count_words(line);
        lines++;
    }
    printf("%zu lines, %zu words\n", lines, words);
    return 0;
}
