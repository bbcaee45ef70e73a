/* Status names, groups and the parameter registry. */
#include <stdlib.h>
#include <string.h>

#include "acx/config.h"
#include "acx/status.h"
#include "acx_test.h"

static void test_names_and_groups(void) {
  CU_ASSERT_STRING_EQUAL(acx_status_name(ACX_ERR_STALE_BUFFER), "ACX_ERR_STALE_BUFFER");
  CU_ASSERT_PTR_NOT_NULL(strstr(acx_status_str(ACX_ERR_DEVICE_LOST), "lost"));
  CU_ASSERT_STRING_EQUAL(acx_status_name((acx_status_t)12345), "ACX_ERR_<unknown>");
  CU_ASSERT(ACX_IS_ARG_ERROR(ACX_ERR_NULL_ARG));
  CU_ASSERT(ACX_IS_DEVICE_ERROR(ACX_ERR_DEVICE_LOST));
  CU_ASSERT(ACX_IS_DEVICE_LOST(ACX_ERR_DEVICE_LOST));
  CU_ASSERT(!ACX_IS_DEVICE_LOST(ACX_ERR_DEVICE_OOM));
  CU_ASSERT(ACX_IS_BUFFER_ERROR(ACX_ERR_STALE_TOKEN));
  CU_ASSERT(ACX_IS_WORLD_ERROR(ACX_ERR_WORLD_REBUILDING));
  CU_ASSERT(ACX_IS_RETRYABLE(ACX_ERR_WORLD_REBUILDING));
  CU_ASSERT(!ACX_IS_RETRYABLE(ACX_ERR_INVALID_ARG));
}

static void test_params(void) {
  int64_t v = 0;
  const char *s = NULL;
  CU_ASSERT(acx_param_count() > 10);
  ACX_ASSERT_STATUS(acx_param_get_int("ACX_THREADS", &v), ACX_ERR_BAD_PARAM); /* set in main */
  CU_ASSERT_EQUAL(v, 2);
  ACX_ASSERT_STATUS(acx_param_get_int("ACX_NO_SUCH_THING", &v), ACX_ERR_NOT_FOUND);
  ACX_ASSERT_STATUS(acx_param_get_int(NULL, &v), ACX_ERR_NULL_ARG);
  ACX_ASSERT_STATUS(acx_param_get_str("ACX_EXECUTOR", &s), ACX_OK);
  CU_ASSERT_STRING_EQUAL(s, "inline");
  acx_param_info_t info;
  ACX_ASSERT_STATUS(acx_param_info(acx_param_count(), &info), ACX_ERR_OUT_OF_RANGE);
  ACX_ASSERT_STATUS(acx_param_info(0, &info), ACX_OK);
  CU_ASSERT_PTR_NOT_NULL(info.help);
}

int main(void) {
  setenv("ACX_THREADS", "two", 1);
  setenv("ACX_EXECUTOR", "inline", 1);
  static const acx_test_case_t cases[] = {ACX_TEST(test_names_and_groups), ACX_TEST(test_params), ACX_TEST_END};
  return acx_test_run("status", cases, NULL, NULL);
}
