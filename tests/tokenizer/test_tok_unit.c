#include "testutil.h"
int main(void) { return kw_test_finish(); }
