#ifndef COUNT_H
#define COUNT_H
#include <stddef.h>
size_t count_words(const char *text);
#endif
