/*
 * Runs a fuzz target's entry point over the files given on the command
 * line (the committed corpus and crash regressions), so every input the
 * fuzzer ever found interesting is re-checked by `make check` under gcc,
 * valgrind and the sanitizers, without needing clang.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int main(int argc, char **argv)
{
    int ran = 0;
    for (int i = 1; i < argc; i++) {
        FILE *f = fopen(argv[i], "rb");
        if (!f) {
            perror(argv[i]);
            return 1;
        }
        static uint8_t buf[1 << 20];
        size_t n = fread(buf, 1, sizeof(buf), f);
        fclose(f);
        LLVMFuzzerTestOneInput(buf, n);
        ran++;
    }
    printf("replayed %d inputs\n", ran);
    return ran > 0 ? 0 : 1;
}
